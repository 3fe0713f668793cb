"""RunService with real worker processes: the state machine, crashes, hangs, timeouts,
cancellation, interactions and stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlmodel import Session, select

from tests import prepared
from tests.conftest import EXAMPLES, TORTURE
from tests.helpers import next_update, process_gone, run_to_end, start_run, wait_until_gone
from webui.errors import InteractionClosed, InteractionConflict, InvalidAnswer
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.store.models import AuditEvent, Interaction, Run
from webui.workflows.project import Project, load_project

# On PostgreSQL the run service is in its shared mode (answers followed through the
# database, limits counted in it): it runs on both dialects (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]


@pytest.fixture
async def svc(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url, kill_grace_seconds=0.5)
    async with open_services(settings) as services:
        yield services


@pytest.fixture(scope="module")
def torture() -> Project:
    return load_project(TORTURE)


def events(svc: Services, run_id: str, kind: str | None = None) -> list[str]:
    return [e.text or "" for e in run_store.list_events(svc.engine, run_id=run_id) if kind in (None, e.kind)]


async def test_a_plain_run_succeeds_with_its_output_and_a_persisted_timeline(svc: Services) -> None:
    hello = load_project(EXAMPLES / "hello")
    run_id = await start_run(svc, hello, "greet", {"name": "Ann", "times": 2})
    final = await next_update(svc, run_id)
    assert (final.status, final.output) == ("success", {"greeting": "Hello, Ann! Hello, Ann!"})
    run = run_store.get_run(svc.engine, run_id=run_id)
    assert run is not None and run.status == "success" and run.source == "mcp"
    assert events(svc, run_id, "state") == ["queued", "running", "success"]
    assert "greeting Ann" in events(svc, run_id, "log")


async def test_stdout_and_stderr_noise_land_in_the_run_log(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "noisy")
    final = await next_update(svc, run_id)
    assert final.status == "success"
    out = "".join(events(svc, run_id, "stdout"))
    assert "plain stdout noise" in out and "raw fd-1 write" in out and "from a subprocess" in out
    assert "to stderr" in "".join(events(svc, run_id, "stderr"))


async def test_an_exception_fails_the_run_without_leaking_its_text(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "raise_error")
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert final.error == {"code": "handler_error", "message": "The handler raised ValueError."}
    assert "hunter2" in "".join(events(svc, run_id, "stderr"))  # the full report keeps it


@pytest.mark.parametrize(
    ("entrypoint", "code", "message_part"),
    [
        # The process gone without an outcome: no result of the handler's own.
        ("exit_code", "worker_crashed", "exited with code 3"),
        ("kill_self", "worker_crashed", "killed by SIGKILL"),
        ("segfault", "worker_crashed", "killed by SIGSEGV"),
        # sys.exit is an exception the worker reports as the handler's error.
        ("sys_exit", "handler_error", "sys.exit(4)"),
    ],
)
async def test_a_crashing_worker_fails_the_run_with_the_reason(
    svc: Services, torture: Project, entrypoint: str, code: str, message_part: str
) -> None:
    final = await run_to_end(svc, torture, entrypoint)
    assert final.status == "failed"
    assert final.error is not None and final.error["code"] == code
    assert message_part in final.error["message"]


async def test_the_service_keeps_working_after_a_crash(svc: Services, torture: Project) -> None:
    await run_to_end(svc, torture, "segfault")
    final = await run_to_end(svc, torture, "progress")
    assert (final.status, final.output) == ("success", {"steps": 3})


@pytest.mark.parametrize("entrypoint", ["hang", "hang_stubborn"])
async def test_a_hanging_handler_times_out_and_leaves_no_process(
    svc: Services, torture: Project, entrypoint: str
) -> None:
    run_id = await start_run(svc, torture, entrypoint)
    with anyio.fail_after(10):
        while svc.runs.live_worker_pid(run_id) is None:
            await anyio.sleep(0.01)
    pid = svc.runs.live_worker_pid(run_id)
    assert pid is not None
    final = await next_update(svc, run_id)
    assert final.status == "timeout"
    assert final.error == {"code": "timeout", "message": "The run exceeded its time limit of 1 s."}
    assert process_gone(pid)


async def test_cancelling_kills_the_worker_and_its_subprocesses(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "sleep", {"grandchild": True})
    progress = await next_update(svc, run_id, ("progress",))
    assert progress.progress is not None
    pids = dict(part.split("=") for part in str(progress.progress["message"]).split())
    await svc.runs.cancel(run_id, reason="stop")
    run = run_store.get_run(svc.engine, run_id=run_id)
    assert run is not None and run.status == "cancelled"
    assert run.error == {"code": "cancelled", "message": "stop"}
    await wait_until_gone([int(pids["worker"]), int(pids["grandchild"])])
    assert svc.pool.busy_pids() == set()


async def test_a_run_waits_for_input_and_resumes_on_the_same_worker(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "ask_once")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.status == "waiting_for_input" and waiting.interaction is not None
    pid = svc.runs.live_worker_pid(run_id)
    ia = waiting.interaction
    assert ia.requested_schema["required"] == ["name"]
    run = run_store.get_run(svc.engine, run_id=run_id)
    assert run is not None and run.status == "waiting_for_input"
    async with svc.runs.watch(run_id) as updates:
        await svc.interactions.answer(ia.id, action="accept", content={"name": "Zoe"}, channel="test")
        with anyio.fail_after(10):
            kinds = []
            while (update := await updates.get()).kind != "final":
                kinds.append(update.kind)
    assert kinds == ["waiting", "running"]  # where it stood when watched, then resumed
    assert (update.status, update.output) == ("success", {"name": "Zoe"})
    assert pid is not None and svc.runs.live_worker_pid(run_id) is None
    assert events(svc, run_id, "state") == ["queued", "running", "waiting_for_input", "running", "success"]


async def test_declining_makes_ask_return_none_and_approve_false(svc: Services, torture: Project) -> None:
    for ep, expected in (("ask_once", {"declined": True}), ("approve_only", {"approved": False})):
        run_id = await start_run(svc, torture, ep)
        waiting = await next_update(svc, run_id, ("waiting",))
        assert waiting.interaction is not None
        await svc.interactions.answer(waiting.interaction.id, action="decline", channel="test")
        final = await next_update(svc, run_id)
        assert (final.status, final.output) == ("success", expected)


async def test_accepting_an_approval_returns_true(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "approve_only")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.interaction is not None and waiting.interaction.kind == "approval"
    assert "delete everything" in waiting.interaction.title
    await svc.interactions.answer(waiting.interaction.id, action="accept", content={}, channel="test")
    assert (await next_update(svc, run_id)).output == {"approved": True}


async def test_a_cancel_answer_cancels_the_run(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "ask_once")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.interaction is not None
    pid = svc.runs.live_worker_pid(run_id)
    await svc.interactions.answer(waiting.interaction.id, action="cancel", channel="test")
    run = run_store.get_run(svc.engine, run_id=run_id)
    assert run is not None and run.status == "cancelled"
    assert pid is not None
    await wait_until_gone([pid])


async def test_answers_are_validated_first_wins_identical_repeats_conflicts_rejected(
    svc: Services, torture: Project
) -> None:
    run_id = await start_run(svc, torture, "ask_once")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.interaction is not None
    ia_id = waiting.interaction.id
    with pytest.raises(InvalidAnswer, match="'name' is a required property"):
        await svc.interactions.answer(ia_id, action="accept", content={}, channel="test")
    with pytest.raises(InvalidAnswer, match="action must be one of"):
        await svc.interactions.answer(ia_id, action="maybe", channel="test")
    assert svc.interactions.get(ia_id).status == "pending"
    first = await svc.interactions.answer(ia_id, action="accept", content={"name": "A"}, channel="test")
    assert not first.repeated
    again = await svc.interactions.answer(ia_id, action="accept", content={"name": "A"}, channel="other")
    assert again.repeated
    with pytest.raises(InteractionConflict):
        await svc.interactions.answer(ia_id, action="accept", content={"name": "B"}, channel="test")
    with pytest.raises(InteractionConflict):
        await svc.interactions.answer(ia_id, action="decline", channel="test")
    assert (await next_update(svc, run_id)).output == {"name": "A"}


async def test_an_interaction_of_a_finished_run_is_closed(svc: Services, torture: Project) -> None:
    run_id = await start_run(svc, torture, "ask_once")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.interaction is not None
    await svc.runs.cancel(run_id)
    with pytest.raises(InteractionClosed):
        await svc.interactions.answer(
            waiting.interaction.id, action="accept", content={"name": "x"}, channel="t"
        )


async def test_the_time_limit_pauses_while_a_person_answers(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "slowpoke"
    root.mkdir()
    (root / "package.json").write_text(
        '{"id": "6f1e2d3c-4b5a-4987-8654-3210fedcba98", "name": "slowpoke", "projectType": "workflow",'
        ' "entrypoints": [{"id": "ask", "handler": "h.py:run", "timeoutSeconds": 1}]}',
        encoding="utf-8",
    )
    (root / "h.py").write_text(
        "def run(ctx):\n    return ctx.ask('q', [{'name': 'v', 'type': 'string'}])\n", encoding="utf-8"
    )
    project = load_project(root)
    run_id = await start_run(svc, project, "ask")
    waiting = await next_update(svc, run_id, ("waiting",))
    assert waiting.interaction is not None
    # Longer than the limit: an event that never fires bounds the wait without a sleep.
    with anyio.move_on_after(1.5):
        await anyio.Event().wait()
    await svc.interactions.answer(waiting.interaction.id, action="accept", content={"v": "late"}, channel="t")
    final = await next_update(svc, run_id)
    assert (final.status, final.output) == ("success", {"v": "late"})


@pytest.mark.parametrize(
    ("entrypoint", "error"),
    [
        ("fail_business", {"code": "business_error", "errCode": 42, "message": "the answer is not allowed"}),
        ("unserialisable", None),
        ("ask_bad_fields", {"code": "handler_error", "message": "The handler raised RuntimeError."}),
    ],
)
async def test_failures_carry_a_concise_error(
    svc: Services, torture: Project, entrypoint: str, error: dict[str, Any] | None
) -> None:
    final = await run_to_end(svc, torture, entrypoint)
    assert final.status == "failed"
    if error is None:
        assert final.error is not None and final.error["code"] == "handler_error"
        assert "not JSON-serialisable" in final.error["message"]
    else:
        assert final.error == error


async def test_forms_with_files_or_optionless_arrays_are_flagged_as_not_elicitable(
    svc: Services, torture: Project
) -> None:
    for ep in ("ask_file", "ask_array"):
        run_id = await start_run(svc, torture, ep)
        waiting = await next_update(svc, run_id, ("waiting",))
        assert waiting.interaction is not None and waiting.interaction.blockers
        await svc.runs.cancel(run_id)


async def test_kv_and_values_persist_across_runs(svc: Services) -> None:
    ledger = load_project(EXAMPLES / "ledger")
    first = await run_to_end(svc, ledger, "post_entry", {"amount": 5})
    second = await run_to_end(svc, ledger, "post_entry", {"amount": 7, "memo": "m"})
    assert first.output == {"balance": 5, "entries": 1}
    assert second.output == {"balance": 12, "entries": 2}
    await run_to_end(svc, ledger, "close_period")
    locked = await run_to_end(svc, ledger, "post_entry", {"amount": 1})
    assert locked.error == {"code": "business_error", "errCode": 7, "message": "ledger is locked"}


async def test_separate_kv_and_value_store_dirs_hold_their_own_databases(
    tmp_path: Path, database_url: str
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        kv_store_dir=tmp_path / "kv",
        persistent_value_store_dir=tmp_path / "pv",
    )
    ledger = load_project(EXAMPLES / "ledger")
    async with open_services(settings) as services:
        assert (await run_to_end(services, ledger, "post_entry", {"amount": 3})).output == {
            "balance": 3,
            "entries": 1,
        }
    assert (tmp_path / "kv" / "kv.sqlite3").is_file()
    assert (tmp_path / "pv" / "values.sqlite3").is_file()


async def test_a_queued_run_waits_for_a_slot_and_can_be_cancelled(
    tmp_path: Path, database_url: str, torture: Project
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", database_url=database_url, max_concurrent_runs=1, kill_grace_seconds=0.2
    )
    async with open_services(settings) as services:
        busy = await start_run(services, torture, "sleep")
        await next_update(services, busy, ("progress",))
        queued = await start_run(services, torture, "progress")
        run = run_store.get_run(services.engine, run_id=queued)
        assert run is not None and run.status == "queued"
        await services.runs.cancel(queued)
        run = run_store.get_run(services.engine, run_id=queued)
        assert run is not None and run.status == "cancelled"
        await services.runs.cancel(busy)


async def test_runs_orphaned_by_a_dead_process_are_marked_interrupted_at_start(
    tmp_path: Path, database_url: str
) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    async with open_services(settings) as services:
        with Session(services.engine) as s:
            s.add(
                Run(
                    id="r-dead",
                    project_id="p",
                    entrypoint_id="e",
                    entrypoint_title="E",
                    status="running",
                    owner="1:0",
                )
            )
            s.add(
                Run(
                    id="r-mine",
                    project_id="p",
                    entrypoint_id="e",
                    entrypoint_title="E",
                    status="running",
                    owner=services.runs.owner,
                )
            )
            s.flush()
            s.add(Interaction(id="int_x", run_id="r-dead", kind="form", title="t", requested_schema={}))
            s.commit()
    async with open_services(settings) as services:
        dead = run_store.get_run(services.engine, run_id="r-dead")
        assert dead is not None and dead.status == "failed"
        assert dead.error is not None and dead.error["code"] == "interrupted"
        # Our own process is alive, so its (fake) run is not an orphan of this restart.
        mine = run_store.get_run(services.engine, run_id="r-mine")
        assert mine is not None and mine.status == "running"
        assert services.interactions.get("int_x").status == "closed"


async def test_shutdown_interrupts_live_runs_and_kills_their_workers(
    tmp_path: Path, torture: Project
) -> None:
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    settings = Settings(data_dir=tmp_path / "d")
    async with open_services(settings) as services:
        run_id = await start_run(services, torture, "sleep")
        await next_update(services, run_id, ("progress",))
        pid = services.runs.live_worker_pid(run_id)
    assert pid is not None
    await wait_until_gone([pid])
    async with open_services(settings) as services:
        run = run_store.get_run(services.engine, run_id=run_id)
        assert run is not None and run.status == "failed"
        assert run.error is not None and run.error["code"] == "interrupted"


async def test_output_files_are_stored_and_audited_runs_recorded(svc: Services, tmp_path: Path) -> None:
    files = load_project(EXAMPLES / "files")
    doc = tmp_path / "doc.txt"
    doc.write_text("a\nb\n", encoding="utf-8")
    row = svc.files.import_path(project_id=files.id, path=doc)
    from webui.files.store import worker_view

    run_id = await start_run(svc, files, "summarize", {"document": {"$file": worker_view(row)}})
    final = await next_update(svc, run_id)
    assert final.status == "success", final.error
    out = final.output
    assert out["lines"] == 2 and out["name"] == "doc.txt"
    created = svc.files.get(out["summaryFile"]["id"])
    assert created is not None and created.origin == "output" and created.run_id == run_id
    assert Path(created.storage).read_text(encoding="utf-8") == "doc.txt: 2 lines, 4 bytes\n"
    with Session(svc.engine) as s:
        names = [e.event for e in s.exec(select(AuditEvent).where(AuditEvent.run_id == run_id))]
    assert names == ["run.created", "run.finished"]

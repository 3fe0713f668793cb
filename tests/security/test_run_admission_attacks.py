"""Attacks on the run core's admission (a run created `running` when a slot is free, its
slot `claimed` while the insert is in flight) and on the MCP call's end written with the
run's outcome, on a real RunService with real workers (one process, SQLite):

- bursts of starts never hold more than `max_concurrent_runs` slots, nor more than a
  project's `max_running`, and leave nothing counted as starting or claimed;
- a run being created unclaimed (no slot was free) is ahead of a later start of an account
  holding more: that start does not claim the slot freed meanwhile;
- a create that fails (database busy) or whose caller is cancelled gives its claimed slot
  back and wakes the queue;
- the call's tool.completed is written exactly once: with the outcome while the call
  follows, by the call when it stopped following, and once when the outcome waited in the
  backlog for a locked database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlmodel import Session, select

from tests import prepared
from tests.conftest import EXAMPLES
from tests.helpers import WAIT, next_update
from webui.blocking import DatabaseBusy
from webui.runs.outcomes import FINAL, Record
from webui.runs.request import RunRequest
from webui.runs.types import RunLimits, RunStatus
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.store.models import AuditEvent
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio

SLOTS = 2
HOLD_PY = '''
import os
import time


def hold(ctx):
    """Runs (holding its slot) until the test creates the file `gate` names."""
    while not os.path.exists(ctx.params["gate"]):
        time.sleep(0.01)
    return {"held": ctx.params["gate"]}


def echo(ctx):
    return {"text": ctx.params["text"]}
'''


def hold_project(base: Path) -> Project:
    """The hello example (its id is in the prepared store) with a `hold` entrypoint."""
    folder = base / "hold"
    shutil.copytree(EXAMPLES / "hello", folder)
    doc = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    doc["entrypoints"] = [
        {
            "id": "hold",
            "title": "Hold",
            "handler": "hold.py:hold",
            "params": [{"name": "gate", "type": "string", "required": True}],
        },
        {
            "id": "echo",
            "title": "Echo",
            "handler": "hold.py:echo",
            "params": [{"name": "text", "type": "string", "required": True}],
        },
    ]
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "hold.py").write_text(HOLD_PY, encoding="utf-8")
    return load_project(folder)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return hold_project(tmp_path)


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    prepared.copy_prepared("store", tmp_path / "data")
    settings = Settings(
        data_dir=tmp_path / "data", kill_grace_seconds=0.5, max_concurrent_runs=SLOTS, worker_user=""
    )
    async with open_services(settings) as services:
        yield services


def request(
    project: Project,
    ep: str,
    params: dict[str, Any],
    *,
    account: int | None = None,
    limits: RunLimits | None = None,
    call: bool = False,
) -> RunRequest:
    """A run; `call`: started by an MCP call, as the bridge starts it (the call on the run)."""
    entrypoint = project.entrypoint(ep)
    assert entrypoint is not None
    return RunRequest(
        project=project,
        entrypoint=entrypoint,
        params=params,
        stored_params=params,
        actor="user:ann",
        account_id=account,
        limits=limits or RunLimits(),
        call={"target": "latest", "client_address": "127.0.0.1"} if call else None,
    )


def hold(project: Project, gate: Path, **kw: Any) -> RunRequest:
    return request(project, "hold", {"gate": str(gate)}, **kw)


def guard_slots(svc: Services, monkeypatch: pytest.MonkeyPatch, max_running: int | None = None) -> list[int]:
    """Check, every time a run takes a slot (claimed at creation or entering `running`),
    that no more than the limits hold one; the highest count seen."""
    admission = svc.runs.admission
    seen: list[int] = [0]

    def check() -> None:
        holding, _ = admission.counts()
        seen[0] = max(seen[0], holding)
        assert holding <= admission.max_concurrent_runs, holding
        if max_running is not None:
            by_project: dict[str, int] = {}
            for live in admission._all():  # pyright: ignore[reportPrivateUsage]
                if live.place.held:
                    by_project[live.request.project.id] = by_project.get(live.request.project.id, 0) + 1
            assert all(n <= max_running for n in by_project.values()), by_project

    claim, enter = admission.claim, svc.runs.enter

    def guarded_claim(live: Any) -> bool:
        took = claim(live)
        check()
        return took

    def guarded_enter(live: Any, status: RunStatus, *, announce: bool = True) -> None:
        enter(live, status, announce=announce)
        check()

    monkeypatch.setattr(admission, "claim", guarded_claim)
    monkeypatch.setattr(svc.runs, "enter", guarded_enter)
    return seen


def blocked_create(
    monkeypatch: pytest.MonkeyPatch, blocked: Callable[[Any], bool], *, fail: bool = False
) -> tuple[threading.Event, threading.Event]:
    """run_store.create_run, held (in its database thread) for the runs `blocked` picks until
    `go` is set, then done (or, `fail`: the database said busy); `entered`: one is held."""
    entered, go = threading.Event(), threading.Event()
    real = run_store.create_run

    def create(engine: Any, *, run: Any, audit: Any = None) -> Any:
        if blocked(run):
            entered.set()
            assert go.wait(WAIT)
            if fail:
                raise DatabaseBusy("the database is busy; try again in a moment")
        return real(engine, run=run, audit=audit)

    monkeypatch.setattr(run_store, "create_run", create)
    return entered, go


async def until(condition: Callable[[], bool]) -> None:
    """Wait for what the test asserts next (bounded by the caller's fail_after)."""
    while not condition():
        await asyncio.sleep(0.01)


def clean(svc: Services) -> None:
    admission = svc.runs.admission
    assert admission.starting == {}
    assert admission.claimed == set()
    assert admission.live == {}
    assert admission.counts() == (0, 0)


def status_of(svc: Services, run_id: str) -> RunStatus | None:
    state = svc.runs.live_state(run_id)
    return state.status if state is not None else None


async def test_a_burst_never_holds_more_than_the_slots_and_leaves_nothing_counted(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = guard_slots(svc, monkeypatch)
    gate = tmp_path / "gate"
    ids: list[str] = []
    with anyio.fail_after(WAIT):

        async def one(i: int) -> None:
            ids.append((await svc.runs.start(hold(project, gate, account=i % 3))).run_id)

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
        assert len(ids) == 12
        await until(lambda: svc.runs.admission.counts()[0] == SLOTS)
        assert svc.runs.admission.counts() == (SLOTS, 12 - SLOTS)
        gate.touch()
        finals = [await next_update(svc, run_id) for run_id in ids]
    assert {f.status for f in finals} == {"success"}
    assert seen[0] == SLOTS
    clean(svc)


async def test_a_burst_never_holds_more_than_the_projects_running_limit(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = guard_slots(svc, monkeypatch, max_running=1)
    gate = tmp_path / "gate"
    limits = RunLimits(max_running=1)
    with anyio.fail_after(WAIT):
        handles = await asyncio.gather(
            *(svc.runs.start(hold(project, gate, account=i, limits=limits)) for i in range(8))
        )
        await until(lambda: svc.runs.admission.counts()[0] == 1)
        gate.touch()
        finals = [await next_update(svc, h.run_id) for h in handles]
    assert {f.status for f in finals} == {"success"}
    assert seen[0] == 1
    clean(svc)


async def test_a_later_start_does_not_claim_the_slot_of_a_run_still_being_created(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Account 1 holds a slot, account 2 the other; account 2 starts another run while both
    are held (it is created queued, its insert in flight). Account 2's first run ends, then
    account 1 starts one more: the freed slot goes to account 2's run (it holds none, and
    was first), not to account 1's new one, which would then hold both slots."""
    guard_slots(svc, monkeypatch)
    gates = {name: tmp_path / name for name in ("a0", "x", "b2", "a1")}
    entered, go = blocked_create(monkeypatch, lambda run: run.params.get("gate") == str(gates["b2"]))
    with anyio.fail_after(WAIT):
        a0 = await svc.runs.start(hold(project, gates["a0"], account=1))
        x = await svc.runs.start(hold(project, gates["x"], account=2))
        starting = asyncio.ensure_future(svc.runs.start(hold(project, gates["b2"], account=2)))
        await anyio.to_thread.run_sync(entered.wait)
        assert svc.runs.admission.starting == {project.id: 1}  # not claimed: both slots held
        gates["x"].touch()
        assert (await next_update(svc, x.run_id)).status == "success"
        a1 = await svc.runs.start(hold(project, gates["a1"], account=1))
        assert not svc.runs.admission.live[a1.run_id].place.created_running, "account 1 jumped the queue"
        go.set()
        b2 = await starting
        await until(lambda: status_of(svc, b2.run_id) == RunStatus.RUNNING)
        assert status_of(svc, a1.run_id) == RunStatus.QUEUED
        for gate in gates.values():
            gate.touch()
        finals = [await next_update(svc, h.run_id) for h in (a0, b2, a1)]
    assert {f.status for f in finals} == {"success"}
    clean(svc)


async def test_a_failed_create_gives_its_claimed_slot_back_and_wakes_the_queue(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard_slots(svc, monkeypatch)
    gate = tmp_path / "gate"
    doomed = tmp_path / "doomed"
    entered, go = blocked_create(monkeypatch, lambda run: run.params.get("gate") == str(doomed), fail=True)
    with anyio.fail_after(WAIT):
        held = await svc.runs.start(hold(project, gate))
        failing = asyncio.ensure_future(svc.runs.start(hold(project, doomed)))
        await anyio.to_thread.run_sync(entered.wait)
        assert len(svc.runs.admission.claimed) == 1  # it took the last slot
        waiter = await svc.runs.start(request(project, "echo", {"text": "next"}))
        assert status_of(svc, waiter.run_id) == RunStatus.QUEUED
        go.set()
        with pytest.raises(DatabaseBusy):
            await failing
        # The slot it claimed is free again: the queued run gets it and ends.
        assert (await next_update(svc, waiter.run_id)).status == "success"
        gate.touch()
        assert (await next_update(svc, held.run_id)).status == "success"
    clean(svc)


async def test_a_cancelled_start_gives_its_claimed_slot_back_and_wakes_the_queue(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard_slots(svc, monkeypatch)
    gate = tmp_path / "gate"
    doomed = tmp_path / "doomed"
    entered, go = blocked_create(monkeypatch, lambda run: run.params.get("gate") == str(doomed), fail=True)
    with anyio.fail_after(WAIT):
        held = await svc.runs.start(hold(project, gate))
        starting = asyncio.ensure_future(svc.runs.start(hold(project, doomed)))
        await anyio.to_thread.run_sync(entered.wait)
        waiter = await svc.runs.start(request(project, "echo", {"text": "next"}))
        assert status_of(svc, waiter.run_id) == RunStatus.QUEUED
        starting.cancel()
        go.set()
        with pytest.raises((asyncio.CancelledError, DatabaseBusy)):
            await starting
        assert (await next_update(svc, waiter.run_id)).status == "success"
        gate.touch()
        assert (await next_update(svc, held.run_id)).status == "success"
    clean(svc)


def call_ends(svc: Services, run_id: str) -> list[tuple[str, str | None, Any]]:
    """The rows that end a call's run: one per fact, its `run.finished` carrying the call
    (`call` in details), never a tool.completed or tool.failed beside it."""
    with Session(svc.engine) as s:
        rows = s.exec(select(AuditEvent).where(AuditEvent.run_id == run_id)).all()  # type: ignore[arg-type]
        ends = ("run.finished", "tool.completed", "tool.failed")
        return [(r.event, r.outcome, (r.details or {}).get("call")) for r in rows if r.event in ends]


async def test_a_burst_of_followed_calls_audits_each_end_exactly_once(
    svc: Services, project: Project, tmp_path: Path
) -> None:
    """Half the calls follow their runs to the end, half stop following at once (as a call
    answering early does) and read the outcome later: each call's end is written once, as its
    run's own `run.finished`."""
    with anyio.fail_after(WAIT):
        handles = await asyncio.gather(
            *(svc.runs.start(request(project, "echo", {"text": str(i)}, call=True)) for i in range(10))
        )
        for i, handle in enumerate(handles):
            if i % 2:
                continue  # stopped following
            async with handle.updates() as updates:
                while (update := await updates.get()).kind != "final":
                    pass
            assert update.status == "success"
        for handle in handles[1::2]:
            assert (await next_update(svc, handle.run_id)).status == "success"
    for handle in handles:
        assert call_ends(svc, handle.run_id) == [("run.finished", "success", "tools/call")]


async def test_a_followed_calls_end_kept_for_a_locked_database_is_written_once(
    svc: Services, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome (the call's end) cannot be written at first: it waits in the backlog, the
    call is told the outcome, and once the database takes it the call's end is there once."""
    backlog = svc.runs.records
    apply = backlog.apply
    unlocked = asyncio.Event()
    attempts: list[int] = []

    def locked_apply(record: Record) -> None:
        if record.kind == FINAL and not unlocked.is_set():
            attempts.append(1)
            raise DatabaseBusy("the database is busy; try again in a moment")
        apply(record)

    monkeypatch.setattr(backlog, "apply", locked_apply)
    with anyio.fail_after(WAIT):
        handle = await svc.runs.start(request(project, "echo", {"text": "kept"}, call=True))
        async with handle.updates() as updates:
            while (update := await updates.get()).kind != "final":
                pass
        assert (update.status, update.output) == ("success", {"text": "kept"})
        assert backlog.final(handle.run_id) is not None
        assert call_ends(svc, handle.run_id) == []
        # Followed again while the outcome waits (from memory), and by id (a later call
        # resuming the run): the same outcome, nothing written of their own.
        async with handle.updates() as again:
            assert ((kept := await again.get()).kind, kept.status) == ("final", "success")
        async with svc.runs.handle(handle.run_id).updates() as other:
            assert ((kept := await other.get()).kind, kept.status) == ("final", "success")
        assert call_ends(svc, handle.run_id) == []
        await until(lambda: len(attempts) >= 2)  # retried by the backlog's loop
        unlocked.set()
        await until(lambda: backlog.final(handle.run_id) is None)
    assert call_ends(svc, handle.run_id) == [("run.finished", "success", "tools/call")]
    clean(svc)


def recorded(svc: Services, run_id: str) -> str | None:
    row = run_store.get_run(svc.engine, run_id=run_id)
    return row.status if row is not None else None


async def test_a_start_cancelled_while_its_run_is_inserted_leaves_no_run_running_undriven(
    svc: Services, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller (an MCP call whose client left) is cancelled while the insert is in its
    thread, which goes on: the run it creates ends cancelled, with the call's end, and gives
    its slot back; nothing stays `running` with nobody driving it."""
    doomed = tmp_path / "doomed"
    entered, go = blocked_create(monkeypatch, lambda run: run.params.get("gate") == str(doomed))
    ids: list[str] = []
    real = run_store.create_run

    def create(engine: Any, *, run: Any, audit: Any = None) -> Any:
        ids.append(run.id)
        return real(engine, run=run, audit=audit)

    monkeypatch.setattr(run_store, "create_run", create)
    with anyio.fail_after(WAIT):
        starting = asyncio.ensure_future(svc.runs.start(hold(project, doomed, call=True)))
        await anyio.to_thread.run_sync(entered.wait)
        starting.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await starting
        await until(lambda: bool(ids))
        run_id = ids[0]
        await until(lambda: recorded(svc, run_id) == "cancelled")
        await until(lambda: not svc.runs.is_live(run_id))
        # The slots are free: two more runs run at once.
        gate = tmp_path / "gate"
        handles = [await svc.runs.start(hold(project, gate)) for _ in range(SLOTS)]
        await until(lambda: svc.runs.admission.counts()[0] == SLOTS)
        gate.touch()
        for handle in handles:
            assert (await next_update(svc, handle.run_id)).status == "success"
    assert call_ends(svc, run_id) == [("run.finished", "cancelled", "tools/call")]
    clean(svc)


async def test_a_graceful_shutdown_writes_each_followed_calls_end_once(
    svc: Services, project: Project, tmp_path: Path
) -> None:
    """Runs holding slots and runs queued behind them are stopped at once: each followed
    call's end is written with the outcome (its run's `run.finished`), once, and the calls
    are told it."""
    gate = tmp_path / "gate"  # never opened
    with anyio.fail_after(WAIT):
        handles = [await svc.runs.start(hold(project, gate, call=True)) for _ in range(SLOTS + 2)]
        await until(lambda: svc.runs.admission.counts() == (SLOTS, 2))
        async with contextlib.AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(h.updates()) for h in handles]
            await svc.runs.stop_all({"code": "shutting_down", "message": "bye"}, grace=0.0)
            finals = []
            for queue in queues:
                while (update := await queue.get()).kind != "final":
                    pass
                finals.append(update)
    assert {f.status for f in finals} == {"failed"}
    for handle in handles:
        assert call_ends(svc, handle.run_id) == [("run.finished", "failed", "tools/call")]
    clean(svc)


async def test_a_burst_started_at_once_is_held_to_the_queue_limit(
    svc: Services, project: Project, tmp_path: Path
) -> None:
    """Every start of the burst passes its preflight before any insert has begun: each one
    must already count (claimed, or queued) when the next one's preflight runs."""
    gate = tmp_path / "burst-gate"
    limits = RunLimits(max_queued=2)
    burst = SLOTS + 2 + 5
    with anyio.fail_after(WAIT):
        outcomes = await asyncio.gather(
            *(svc.runs.start(hold(project, gate, limits=limits)) for _ in range(burst)),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, Exception)]
        started = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(started) == SLOTS + 2, outcomes
        assert {getattr(o, "code", None) for o in refused} == {"queue_limit"}, refused
        gate.touch()
        for handle in started:
            assert (await next_update(svc, handle.run_id)).status == "success"
    await until(lambda: not svc.runs.admission.live)
    clean(svc)

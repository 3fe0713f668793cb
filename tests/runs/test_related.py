"""Child runs in the run service, with real workers: a parent lends its slot to the child
it waits on, sees the child's question, and takes the child down when it ends."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests import prepared
from tests.helpers import WAIT, next_update
from tests.related_projects import write_projects
from webui.runs.related import LocalRelations
from webui.runs.request import RunRequest
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio


async def start_delegate(svc: Services, base: Path) -> str:
    f = write_projects(base)
    main = load_project(f["main"])
    relations = LocalRelations.confirm(main, {"helper": str(f["helper"])}, lambda root: dict(os.environ))
    ep = main.entrypoint("delegate")
    assert ep is not None
    return (
        await svc.runs.start(
            RunRequest(
                project=main,
                entrypoint=ep,
                params={"name": "Ann"},
                stored_params={"name": "Ann"},
                relations=relations,
                related=relations.paths(),
            )
        )
    ).run_id


async def test_one_worker_slot_is_enough_the_parent_lends_it_to_its_child(tmp_path: Path) -> None:
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    settings = Settings(data_dir=tmp_path / "d", max_concurrent_runs=1, kill_grace_seconds=0.2)
    async with open_services(settings) as svc:
        parent = await start_delegate(svc, tmp_path / "p")
        waiting = await next_update(svc, parent, ("waiting",))
        assert waiting.interaction is not None and waiting.interaction.title == "Confirm the greeting"
        child = waiting.interaction.run_id
        assert child is not None and child != parent
        await svc.interactions.answer(
            waiting.interaction.id, action="accept", content={"greeting": "Hi"}, channel="test"
        )
        final = await next_update(svc, parent)
    assert final.status == "success", final.error
    assert final.output["child"] == {"text": "Hi, Ann", "run": child, "salutation": None}  # no configs here


async def test_ending_the_parent_cancels_the_child_and_closes_its_question(tmp_path: Path) -> None:
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "d", kill_grace_seconds=0.2)) as svc:
        parent = await start_delegate(svc, tmp_path / "p")
        waiting = await next_update(svc, parent, ("waiting",))
        assert waiting.interaction is not None and waiting.interaction.run_id is not None
        child_id = waiting.interaction.run_id
        await svc.runs.cancel(parent)
        await next_update(svc, child_id)
        child = run_store.get_run(svc.engine, run_id=child_id)
        assert child is not None and child.status == "cancelled"
        assert child.error is not None and f"parent run {parent} ended (cancelled)" in child.error["message"]
        assert svc.interactions.get(waiting.interaction.id).status != "pending"


async def test_a_cancel_answer_to_the_childs_question_fails_the_parents_handler(tmp_path: Path) -> None:
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "d", kill_grace_seconds=0.2)) as svc:
        parent = await start_delegate(svc, tmp_path / "p")
        waiting = await next_update(svc, parent, ("waiting",))
        assert waiting.interaction is not None
        await svc.interactions.answer(waiting.interaction.id, action="cancel", channel="test")
        final = await next_update(svc, parent)
        stderr = "".join(
            e.text or "" for e in run_store.list_events(svc.engine, run_id=parent) if e.kind == "stderr"
        )
    assert final.status == "failed"
    assert final.error == {"code": "handler_error", "message": "The handler raised RelatedRunFailed."}
    assert "ended cancelled: cancelled: The person cancelled the run." in stderr


async def until(condition: Any) -> None:
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.02)  # polling in-memory state the service changes


RACE = "a1b2c3d4-0000-4000-8000-0000000000e1"
RACE_KID = "a1b2c3d4-0000-4000-8000-0000000000e2"
RACE_PY = """
import os
import threading
import time


def race(ctx):
    got = {}

    def asks():
        got["word"] = ctx.ask("Go on?", [{"name": "word", "type": "string", "required": True}])["word"]

    def starts_a_child_later():
        while not os.path.exists(ctx.params["gate"]):
            time.sleep(0.02)
        got["child"] = ctx.related["kid"].run("echo", n=7)["n"]

    threads = [threading.Thread(target=asks), threading.Thread(target=starts_a_child_later)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def two_questions(ctx):
    got = {}

    def first():
        got["first"] = ctx.ask("First?", [{"name": "w", "type": "string", "required": True}])["w"]

    def second():
        while not os.path.exists(ctx.params["gate"]):
            time.sleep(0.02)
        got["second"] = ctx.ask("Second?", [{"name": "w", "type": "string", "required": True}])["w"]

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def hold(ctx):
    while not os.path.exists(ctx.params["gate"]):
        time.sleep(0.02)
    return {"held": True}
"""
RACE_KID_PY = """
def echo(ctx):
    return {"n": ctx.params["n"]}
"""


async def test_a_run_waiting_again_while_in_line_for_its_slot_gives_the_slot_back(
    tmp_path: Path,
) -> None:
    """One slot. The parent's question is answered while another run holds the slot, so the
    parent waits for it; meanwhile another of its threads starts a child run. When the slot
    frees, the parent (first in line) must not keep it while it waits for that child (the
    child would wait for the slot forever)."""
    gate = {"type": "string", "required": True}
    docs = {
        "race": {
            "id": RACE,
            "name": "race",
            "version": "1.0.0",
            "projectType": "workflow",
            "relatedProjects": [{"alias": "kid", "id": RACE_KID}],
            "entrypoints": [
                {"id": "race", "handler": "race.py:race", "params": [{"name": "gate", **gate}]},
                {"id": "hold", "handler": "race.py:hold", "params": [{"name": "gate", **gate}]},
            ],
        },
        "kid": {
            "id": RACE_KID,
            "name": "race-kid",
            "version": "1.0.0",
            "projectType": "workflow",
            "relatedProjects": [{"alias": "parent", "id": RACE}],
            "entrypoints": [
                {"id": "echo", "handler": "kid.py:echo", "params": [{"name": "n", "type": "number"}]}
            ],
        },
    }
    for name, code, file in (("race", RACE_PY, "race.py"), ("kid", RACE_KID_PY, "kid.py")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "package.json").write_text(json.dumps(docs[name]), encoding="utf-8")
        (tmp_path / name / file).write_text(code, encoding="utf-8")
    gates = Path(tempfile.mkdtemp(prefix="sh-gates-"))
    os.chmod(gates, 0o755)  # the worker user reads it (in its filesystem view: a read path)
    race = load_project(tmp_path / "race")
    relations = LocalRelations.confirm(race, {"kid": str(tmp_path / "kid")}, lambda root: dict(os.environ))

    async def start(ep: str, gate_name: str) -> str:
        entrypoint = race.entrypoint(ep)
        assert entrypoint is not None
        params = {"gate": str(gates / gate_name)}
        return (
            await svc.runs.start(
                RunRequest(
                    project=race,
                    entrypoint=entrypoint,
                    params=params,
                    stored_params=params,
                    relations=relations,
                    related=relations.paths(),
                )
            )
        ).run_id

    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    settings = Settings(
        data_dir=tmp_path / "d", max_concurrent_runs=1, kill_grace_seconds=0.2, worker_read_paths=[str(gates)]
    )
    try:
        async with open_services(settings) as svc:
            parent = await start("race", "child")
            waiting = await next_update(svc, parent, ("waiting",))
            assert waiting.interaction is not None
            holder = await start("hold", "holder")  # takes the slot the question gave up
            await until(lambda: getattr(svc.runs.live_state(holder), "status", None) == "running")
            await svc.interactions.answer(
                waiting.interaction.id, action="accept", content={"word": "yes"}, channel="test"
            )
            live = svc.runs.admission.live[parent]
            await until(lambda: live.place.wanted)  # answered: in line for the slot
            (gates / "child").touch()
            await until(lambda: live.child_waits == 1)  # its other thread started a child
            (gates / "holder").touch()  # the slot frees: the parent is first in line
            final = await next_update(svc, parent)
            assert (final.status, final.output) == ("success", {"word": "yes", "child": 7}), final.error
            assert (await next_update(svc, holder)).status == "success"
    finally:
        shutil.rmtree(gates, ignore_errors=True)


@dataclass
class InLine:
    """A `two_questions` run on a server with one slot, its first question answered while
    a `hold` run holds the slot: the run waits in line; its other thread asks the second
    question once `ask_second()` opens its gate."""

    svc: Services
    run_id: str
    holder: str
    live: Any
    gates: Path

    def ask_second(self) -> None:
        (self.gates / "second").touch()

    def free_the_slot(self) -> None:
        (self.gates / "holder").touch()


@asynccontextmanager
async def in_line(tmp_path: Path) -> AsyncIterator[InLine]:
    gate = {"type": "string", "required": True}
    doc = {
        "id": RACE,
        "name": "race",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "two", "handler": "race.py:two_questions", "params": [{"name": "gate", **gate}]},
            {"id": "hold", "handler": "race.py:hold", "params": [{"name": "gate", **gate}]},
        ],
    }
    (tmp_path / "race").mkdir()
    (tmp_path / "race" / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "race" / "race.py").write_text(RACE_PY, encoding="utf-8")
    gates = Path(tempfile.mkdtemp(prefix="sh-gates-"))
    os.chmod(gates, 0o755)  # the worker user reads it (in its filesystem view: a read path)
    race = load_project(tmp_path / "race")
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    settings = Settings(
        data_dir=tmp_path / "d", max_concurrent_runs=1, kill_grace_seconds=0.2, worker_read_paths=[str(gates)]
    )
    try:
        async with open_services(settings) as svc:

            async def start(ep: str, gate_name: str) -> str:
                entrypoint = race.entrypoint(ep)
                assert entrypoint is not None
                params = {"gate": str(gates / gate_name)}
                request = RunRequest(project=race, entrypoint=entrypoint, params=params, stored_params=params)
                return (await svc.runs.start(request)).run_id

            run_id = await start("two", "second")
            first = await next_update(svc, run_id, ("waiting",))
            assert first.interaction is not None
            holder = await start("hold", "holder")
            await until(lambda: getattr(svc.runs.live_state(holder), "status", None) == "running")
            answer = {"w": "a"}
            await svc.interactions.answer(
                first.interaction.id, action="accept", content=answer, channel="test"
            )
            live = svc.runs.admission.live[run_id]  # the admission state under test
            await until(lambda: live.place.wanted)  # answered: in line for the slot
            yield InLine(svc, run_id, holder, live, gates)
    finally:
        shutil.rmtree(gates, ignore_errors=True)


async def test_a_question_being_recorded_when_the_slot_frees_keeps_the_run_waiting(tmp_path: Path) -> None:
    """While the run waits in line its other thread asks a second question, whose record is
    slow to write; the slot frees meanwhile. The run must not take it back as `running`
    (its time limit ticking, its question hidden): it waits for the second answer, holding
    none."""
    async with in_line(tmp_path) as line:
        svc, live = line.svc, line.live
        recording = anyio.Event()
        release = threading.Event()
        create = svc.runs.interactions.create_round

        def slow_create(**fields: Any) -> Any:
            anyio.from_thread.run_sync(recording.set)
            release.wait(WAIT)
            return create(**fields)

        svc.runs.interactions.create_round = slow_create  # type: ignore[method-assign]
        line.ask_second()
        with anyio.fail_after(WAIT):
            await recording.wait()  # the second question's record waits until the slot freed
        line.free_the_slot()
        assert (await next_update(svc, line.holder)).status == "success"
        await until(lambda: not live.place.wanted)  # its resumption has run
        release.set()
        await until(lambda: len(live.asks.pending) == 1)
        async with live.writes:  # every record of the run written
            pass
        stored = run_store.get_run(svc.engine, run_id=line.run_id)
        assert stored is not None and stored.status == "waiting_for_input"
        assert not live.place.held and live.budget.timer is None
        second = svc.interactions.pending_for_run(line.run_id)
        assert second is not None and second.title == "Second?"
        await svc.interactions.answer(second.id, action="accept", content={"w": "b"}, channel="test")
        final = await next_update(svc, line.run_id)
        assert (final.status, final.output) == ("success", {"first": "a", "second": "b"}), final.error


async def test_two_answers_given_while_the_run_is_in_line_resume_it_once(tmp_path: Path) -> None:
    """Both of the run's questions are answered while it waits in line: the second
    resumption waits for the first (two in line for one slot, the second would wait for the
    slot its own run holds); both threads get their answers."""
    async with in_line(tmp_path) as line:
        svc, live = line.svc, line.live
        line.ask_second()
        await until(lambda: len(live.asks.pending) == 1)
        (second,) = live.asks.pending
        await svc.interactions.answer(second, action="accept", content={"w": "b"}, channel="test")
        await until(lambda: live.asks.resumers == 1)  # the second waits for the first
        line.free_the_slot()
        final = await next_update(svc, line.run_id)
        assert (final.status, final.output) == ("success", {"first": "a", "second": "b"}), final.error

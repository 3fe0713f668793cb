"""Child runs in the run service, with real workers: a parent lends its slot to the child
it waits on, sees the child's question, and takes the child down when it ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import next_update
from tests.related_projects import write_projects
from webui.runs.related import LocalRelations
from webui.runs.service import RunRequest
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
    return await svc.runs.start(
        RunRequest(
            project=main,
            entrypoint=ep,
            params={"name": "Ann"},
            stored_params={"name": "Ann"},
            relations=relations,
            related=relations.paths(),
        )
    )


async def test_one_worker_slot_is_enough_the_parent_lends_it_to_its_child(tmp_path: Path) -> None:
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

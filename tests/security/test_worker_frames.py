"""A worker's frames nested too deeply to parse: the run fails as for any malformed frame,
and the worker is killed (before the fix the RecursionError escaped the reader, the run
was reported "internal" and the worker outlived its run, its timeout and its slot)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import next_update, process_gone, start_run
from tests.security.workers_project import write_project
from webui.services import Services, open_services
from webui.settings import Settings
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Module-wide, so the run service below serves every test of the module on one loop."""
    return "asyncio"


@pytest.fixture(scope="module")
async def svc(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Services]:
    """One run service and worker pool for the module (each test's runs are its own)."""
    data_dir = tmp_path_factory.mktemp("worker-frames") / "data"
    async with open_services(Settings(data_dir=data_dir, kill_grace_seconds=0.5)) as services:
        yield services


@pytest.fixture
def intruder(tmp_path: Path) -> Project:
    return load_project(write_project(tmp_path / "intruder"))


async def test_a_frame_nested_past_the_parsers_limit_kills_the_worker_and_fails_the_run(
    svc: Services, intruder: Project
) -> None:
    run_id = await start_run(svc, intruder, "deep_frame")
    update = await next_update(svc, run_id, ("progress",))
    assert update.progress is not None
    worker = int(str(update.progress["message"]))
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert final.error == {"code": "handler_error", "message": "The worker sent a malformed message."}
    assert process_gone(worker)


@pytest.mark.parametrize(
    "requires",
    [["evil"], [], "sampling", [{"sampling": {}}], ["sampling", "x" * 10_000], None],
)
async def test_a_forged_capability_outcome_naming_no_known_capability_is_a_plain_handler_error(
    svc: Services, intruder: Project, requires: Any
) -> None:
    frame = {"type": "error", "code": "capability_required", "requires": requires, "message": "<b>m</b>"}
    run_id = await start_run(svc, intruder, "forged_outcome", {"frame": json.dumps(frame)})
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert final.error == {"code": "handler_error", "message": "<b>m</b>"}


async def test_a_forged_capability_outcome_naming_a_known_one_is_only_that(
    svc: Services, intruder: Project
) -> None:
    requires = ["roots"] * 100_000  # repeated: stored once
    frame = {"type": "error", "code": "capability_required", "requires": requires, "message": "m", "x": 1}
    run_id = await start_run(svc, intruder, "forged_outcome", {"frame": json.dumps(frame)})
    final = await next_update(svc, run_id)
    assert final.error == {"code": "capability_required", "message": "m", "requires": ["roots"]}

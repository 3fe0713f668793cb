"""Small shared helpers for tests: process checks, bounded waits, and runs started on the run service."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from jinja2_fragments.fastapi import Jinja2Blocks

from webui.app import create_app
from webui.runs.request import RunRequest
from webui.runs.types import RunUpdate
from webui.services import Services
from webui.settings import Settings
from webui.web.templating import make_templates
from webui.workflows.project import Project

# The bound on a test's waits for another process: to start, to answer, to make the write the
# test polls for. A bound, not a speed check: generous so that a loaded 2-core machine (CI, or
# several suites at once) passes; a test that is really stuck is ended by the pytest-timeout
# guard (pyproject.toml). STEAMHARNESS_TEST_WAIT sets it.
WAIT = float(os.environ.get("STEAMHARNESS_TEST_WAIT", "180"))
RUN_WAIT_SECONDS = WAIT  # the bound on waiting for one update of a run


def strictly_increasing(values: list[float]) -> bool:
    """What MCP requires of the `progress` values of one request's notifications."""
    return all(a < b for a, b in itertools.pairwise(values))


def process_gone(pid: int) -> bool:
    """True once `pid` no longer runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def wait_until_gone(pids: list[int], timeout: float = 10.0) -> None:
    """Bounded wait on a condition the kernel changes asynchronously."""
    with anyio.fail_after(timeout):
        while not all(process_gone(p) for p in pids):
            await anyio.sleep(0.02)


async def start_run(svc: Services, project: Project, ep: str, params: dict[str, Any] | None = None) -> str:
    """Start entrypoint `ep` of `project` on the run service with `params`; the run's id."""
    entrypoint = project.entrypoint(ep)
    assert entrypoint is not None
    return (
        await svc.runs.start(
            RunRequest(
                project=project, entrypoint=entrypoint, params=params or {}, stored_params=params or {}
            )
        )
    ).run_id


async def next_update(svc: Services, run_id: str, kinds: tuple[str, ...] = ("final",)) -> RunUpdate:
    """The run's next update of one of `kinds` (its final one by default), within RUN_WAIT_SECONDS."""
    async with svc.runs.watch(run_id) as updates:
        with anyio.fail_after(RUN_WAIT_SECONDS):
            while True:
                update = await updates.get()
                if update.kind in kinds:
                    return update


def page_templates(data_dir: Path) -> Jinja2Blocks:
    """The templates of an app built on `data_dir` (never started, nothing written there):
    their `url(...)` names that app's routes."""
    return make_templates(create_app(Settings(data_dir=data_dir)).router)


async def run_to_end(
    svc: Services, project: Project, ep: str, params: dict[str, Any] | None = None
) -> RunUpdate:
    """Start a run and wait for its final update."""
    return await next_update(svc, await start_run(svc, project, ep, params))


# Only a server running as root switches its workers (and host servers) to other users; a
# developer's non-root run skips these tests. Under CI (CI set) they always run: a CI that is
# not root fails them loudly instead of passing with the isolation untested.
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and not os.environ.get("CI"),
    reason="needs root: only a root server switches workers to other users (CI always runs these)",
)

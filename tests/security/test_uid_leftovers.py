"""What a run leaves in the shared temporary folders (/tmp, /var/tmp, /dev/shm) under its
per-run uid is gone before that uid is handed to another run: otherwise the next run given
the uid (another account's, perhaps) owns those files, reads them whatever their mode, and
finds anything planted there for it. In its filesystem view, those folders are the run's
own; without one (where no view can be built), they are the host's, swept. In process,
with a range of a few uids, runs until one gets the first run's uid again."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import needs_root, run_to_end
from webui.runs.pool import WorkerPool
from webui.runs.types import RunUpdate
from webui.services import Services, open_services
from webui.settings import Settings
from webui.workflows.project import Project, load_project

pytestmark = [
    pytest.mark.anyio,
    needs_root,
]

PROJECT_ID = "7a1e3c5d-2b4f-4a6e-9c8d-0f1e2d3c4b5a"
FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
UIDS = 3

HANDLERS = r"""
import os


def leave(ctx):
    tag = ctx.params["tag"]
    left = []
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.join(folder, tag)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except PermissionError:
            continue  # the host's own, closed to the run (only without a view)
        os.write(fd, b"the first run's secret")
        os.close(fd)
        os.mkdir(path + ".d", 0o700)
        with open(os.path.join(path + ".d", "inner"), "w") as fh:
            fh.write("more")
        left.append(folder)
    return {"uid": os.getuid(), "left": left}


def look(ctx):
    tag = ctx.params["tag"]
    found = {}
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.join(folder, tag)
        try:
            with open(path) as fh:
                found[folder] = fh.read()
        except OSError as exc:
            found[folder] = type(exc).__name__
        found[folder + ".d"] = os.path.exists(path + ".d")
    return {"uid": os.getuid(), "found": found}
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    folder = tmp_path / "leftovers"
    folder.mkdir()
    param = [{"name": "tag", "type": "string"}]
    package = {
        "id": PROJECT_ID,
        "name": "leftovers",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "leave", "handler": "h.py:leave", "params": param, "timeoutSeconds": 60},
            {"id": "look", "handler": "h.py:look", "params": param, "timeoutSeconds": 60},
        ],
    }
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (folder / "h.py").write_text(HANDLERS, encoding="utf-8")
    return load_project(folder)


@pytest.fixture(params=["view", "no view"])
async def svc(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Services]:
    """With a filesystem view, a run's /tmp, /var/tmp and /dev/shm are its own; without one
    (a host where none can be built) they are the host's, swept when the uid is given back."""
    if request.param == "no view":
        monkeypatch.setattr(WorkerPool, "_view_argument", lambda self: [])
    settings = Settings(data_dir=tmp_path / "data", kill_grace_seconds=0.5, worker_uid_count=UIDS)
    async with open_services(settings) as services:
        yield services


async def test_the_next_run_on_a_uid_finds_nothing_the_last_one_left_in_shared_temp_folders(
    svc: Services, project: Project
) -> None:
    tag = f"sh-leftover-{secrets.token_hex(6)}"
    try:
        first = await run_to_end(svc, project, "leave", {"tag": tag})
        assert first.status == "success", first.error
        if svc.pool.views_built:  # the run's own folders, whatever the host's allow
            assert first.output["left"] == list(FOLDERS)
        second: RunUpdate | None = None
        for _ in range(UIDS + 1):
            second = await run_to_end(svc, project, "look", {"tag": tag})
            assert second.status == "success", second.error
            if second.output["uid"] == first.output["uid"]:
                break  # the same uid, given back and taken again
        assert second is not None
        assert second.output["uid"] == first.output["uid"]
        for folder in FOLDERS:
            assert second.output["found"][folder] == "FileNotFoundError"
            assert second.output["found"][folder + ".d"] is False
    finally:
        for folder in FOLDERS:
            (Path(folder) / tag).unlink(missing_ok=True)
            shutil.rmtree(Path(folder) / f"{tag}.d", ignore_errors=True)

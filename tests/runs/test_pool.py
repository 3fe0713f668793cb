"""The worker pool starts lazily: no zygote until the first run, one zygote however many
first runs arrive at once, nothing to stop when nothing ran, and a new zygote after one
died. Real processes throughout, read from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import anyio
import pytest

from tests import prepared
from tests.conftest import TORTURE
from tests.helpers import WAIT, next_update, process_gone, run_to_end, start_run, wait_until_gone
from webui.runs import procs
from webui.runs.messages import RunSpec
from webui.runs.pool import WorkerPool
from webui.services import Services, open_services
from webui.settings import Settings
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio


def spec(run_id: str) -> RunSpec:
    """A run's spec holding only its id: the pool hands a spec to its worker without reading more."""
    return cast(RunSpec, {"runId": run_id})


def zygotes() -> set[int]:
    """The live zygote processes this test process started (any pool's)."""
    found = set()
    for pid in procs.children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"webui.runs.zygote" in argv and not process_gone(pid):
            found.add(pid)
    return found


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "data", kill_grace_seconds=0.5)) as services:
        yield services


@pytest.fixture(scope="module")
def torture() -> Project:
    return load_project(TORTURE)


async def sleeping_worker(svc: Services, torture: Project) -> tuple[str, int]:
    """A `sleep` run that has reported its worker: (run id, worker pid)."""
    run_id = await start_run(svc, torture, "sleep")
    progress = await next_update(svc, run_id, ("progress",))
    assert progress.progress is not None
    pids = dict(part.split("=") for part in str(progress.progress["message"]).split())
    return run_id, int(pids["worker"])


async def spares_of(pool: WorkerPool, count: int) -> set[int]:
    """The pool's spare workers once it holds `count` of them (bounded)."""
    with anyio.fail_after(WAIT):
        while len(spares := pool.live_pids() - pool.busy_pids()) < count:
            await anyio.sleep(0.02)  # the spares are forked in the background
    return spares


async def test_the_pool_has_no_zygote_until_the_first_run(tmp_path: Path, torture: Project) -> None:
    before = zygotes()
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "data")) as svc:
        assert zygotes() == before and svc.pool.zygote_pid is None
        assert svc.pool.live_pids() == set()
        final = await run_to_end(svc, torture, "progress")
        assert (final.status, final.output) == ("success", {"steps": 3})
        assert zygotes() - before == {svc.pool.zygote_pid}
    assert zygotes() == before


async def test_once_warm_a_run_starts_on_a_spare_forked_ahead_of_time(
    svc: Services, torture: Project
) -> None:
    await run_to_end(svc, torture, "progress")  # the first run starts the zygote, then the spares
    spares = await spares_of(svc.pool, 2)
    run_id, worker = await sleeping_worker(svc, torture)
    assert worker in spares and parent_of(worker) == svc.pool.zygote_pid
    await svc.runs.cancel(run_id, reason="done")


async def test_two_first_spawns_at_once_start_exactly_one_zygote(tmp_path: Path) -> None:
    before = zygotes()
    pool = WorkerPool(spares=0)
    try:
        # Both reach the start of the zygote before either has one: gather runs them together.
        workers = await asyncio.gather(*(pool.spawn(spec(f"r-first-{n}")) for n in range(2)))
        assert len(zygotes() - before) == 1
        (zygote,) = zygotes() - before
        assert zygote == pool.zygote_pid
        for worker in workers:
            worker.kill()
        # A worker given a spec it cannot run ends at once, so /proc may have forgotten it: the
        # exit of each is reported by the zygote that forked it (only a parent can), the one.
        assert None not in [await pool.wait_exit(w.pid, WAIT) for w in workers]
        for worker in workers:
            worker.close()
    finally:
        await pool.close()
    assert zygotes() == before


async def test_two_first_runs_at_once_start_exactly_one_zygote(svc: Services, torture: Project) -> None:
    before = zygotes()
    run_ids = await asyncio.gather(start_run(svc, torture, "progress"), start_run(svc, torture, "progress"))
    finals = await asyncio.gather(*(next_update(svc, run_id) for run_id in run_ids))
    assert [f.status for f in finals] == ["success", "success"]
    assert zygotes() - before == {svc.pool.zygote_pid}


async def test_closing_a_pool_that_never_ran_anything_starts_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the pool would make its folders
    before = zygotes()
    pool = WorkerPool()
    await pool.close()
    assert zygotes() == before and pool.zygote_pid is None
    assert list(tmp_path.iterdir()) == []  # no socket folder, no scratch root
    with pytest.raises(RuntimeError, match="closed"):
        await pool.spawn(spec("r-after-close"))
    assert zygotes() == before and list(tmp_path.iterdir()) == []


async def test_services_opened_and_closed_without_a_run_never_start_a_zygote(tmp_path: Path) -> None:
    before = zygotes()
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "data")) as svc:
        assert svc.pool.zygote_pid is None
    assert zygotes() == before


async def test_a_run_after_the_zygote_died_runs_on_a_new_zygote(svc: Services, torture: Project) -> None:
    await run_to_end(svc, torture, "progress")
    old_spares = await spares_of(svc.pool, 2)
    old = svc.pool.zygote_pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    # Its spares go with it: nobody would kill their strays or report their exits.
    await wait_until_gone([old, *old_spares], timeout=WAIT)
    run_id, worker = await sleeping_worker(svc, torture)
    new = svc.pool.zygote_pid
    assert new is not None and new != old
    assert worker not in old_spares and parent_of(worker) == new
    await svc.runs.cancel(run_id, reason="done")
    final = await run_to_end(svc, torture, "progress")
    assert (final.status, final.output) == ("success", {"steps": 3})


async def test_a_warmed_pool_starts_its_zygote_and_spares_before_any_run(tmp_path: Path) -> None:
    before = zygotes()
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "data"), warm_pool=True) as svc:
        spares = await spares_of(svc.pool, 2)
        (zygote,) = zygotes() - before
        assert zygote == svc.pool.zygote_pid and {parent_of(pid) for pid in spares} == {zygote}
    assert zygotes() == before


async def test_a_zygote_that_fails_to_start_fails_the_run_and_the_next_run_starts_one(
    svc: Services, torture: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = zygotes()
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")  # its interpreter cannot even start
    final = await run_to_end(svc, torture, "progress")
    assert final.status == "failed" and final.error is not None and final.error["code"] == "internal"
    assert zygotes() == before and svc.pool.zygote_pid is None
    monkeypatch.delenv("PYTHONHOME")
    final = await run_to_end(svc, torture, "progress")
    assert (final.status, final.output) == ("success", {"steps": 3})
    assert zygotes() - before == {svc.pool.zygote_pid}


async def test_a_first_spawn_cancelled_while_the_zygote_starts_leaves_no_half_started_zygote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interpreter that never says it is ready: the start is still under way when cancelled.
    hung = tmp_path / "never-ready"
    hung.write_text("#!/bin/sh\nexec sleep 317\n", encoding="utf-8")
    hung.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(hung))

    def starting() -> set[int]:
        found = set()
        for pid in procs.children(os.getpid()):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[:2] == [b"sleep", b"317"] and not process_gone(pid):
                    found.add(pid)
        return found

    before = zygotes()
    pool = WorkerPool(spares=0)
    try:
        first = asyncio.create_task(pool.spawn(spec("r-cancelled")))
        with anyio.fail_after(WAIT):
            while not (started := starting()):
                await anyio.sleep(0.02)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        # Not kept as if it were the pool's zygote: the next run would wait for its forks in vain.
        await wait_until_gone(list(started), timeout=WAIT)
        assert pool.zygote_pid is None
        monkeypatch.undo()
        worker = await pool.spawn(spec("r-next"))
        try:
            assert zygotes() - before == {pool.zygote_pid}
            # A worker given a spec it cannot run ends at once (so /proc may have forgotten
            # it): its exit is reported by the zygote that forked it, the new one.
            assert await pool.wait_exit(worker.pid, WAIT) is not None
        finally:
            worker.kill()
            worker.close()
    finally:
        await pool.close()
    assert zygotes() == before


async def test_a_pool_whose_socket_could_not_be_opened_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the pool makes its folders
    real = asyncio.start_unix_server
    failures = iter([OSError(24, "Too many open files")])

    async def fails_once(*args: object, **kwargs: object) -> asyncio.AbstractServer:
        for exc in failures:
            raise exc
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio, "start_unix_server", fails_once)
    before = zygotes()
    pool = WorkerPool(spares=0)
    try:
        with pytest.raises(OSError, match="Too many open files"):
            await pool.spawn(spec("r-no-socket"))
        worker = await pool.spawn(spec("r-next"))  # the next run opens it
        try:
            # It ends at once (a spec it cannot run): its exit report says it was forked.
            assert await pool.wait_exit(worker.pid, WAIT) is not None
        finally:
            worker.kill()
            worker.close()
    finally:
        await pool.close()
    assert zygotes() == before
    assert list(tmp_path.iterdir()) == []  # the first try's folders are gone with the pool too

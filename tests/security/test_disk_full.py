"""A full disk under a real `steamharness serve`: its data dir is a small tmpfs the test
fills to the last block. Uploads, configuration writes and answers get a JSON 507
`storage_full` (not a bare 500) and nothing they touched is left half-written; a tool call
that cannot record its run is told the storage is full; a run that finishes meanwhile gives
its client the real result, and its outcome is written once space is freed. The mapping of
PostgreSQL's disk_full (SQLSTATE 53100) is checked on the driver's own error class.

The test runs as root (it mounts the tmpfs) and fails, naming the reason, where it cannot."""

from __future__ import annotations

import errno
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import psycopg.errors
import pytest
from mcp.shared.exceptions import MCPError
from sqlalchemy.exc import OperationalError

from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import INTERACTIVE, LiveServer
from tests.e2e.test_http_mcp import sdk_client
from tests.helpers import WAIT
from tests.security.test_db_locked import OUTCOMES, outcomes_server, retried, stored, stored_run
from tests.security.test_limits import error_of, payload, upload
from webui.blocking import unavailable
from webui.errors import StorageFull

pytestmark = pytest.mark.anyio

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
DISK_SIZE = "16m"
CONFIGS = f"/api/workflows/{SETTINGS_PROJECT}/configs"


class Disk:
    """The data dir's filesystem, filled to its last block by one file the test controls."""

    def __init__(self, mount: Path) -> None:
        self.filler = mount / "filler"

    def fill(self) -> None:
        """Write until the filesystem refuses another byte (again: the server may have freed
        some, e.g. an aborted upload's temp file)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1024 * 1024, 4096, 1):
                block = b"\0" * size
                while True:
                    try:
                        os.write(fd, block)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE at the future data dir, unmounted afterwards."""
    folder = tmp_path_factory.mktemp("disk-full")
    data = folder / "data"
    data.mkdir(mode=0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(data)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.fail(
            f"these tests mount a tmpfs for the data dir (as root); mount failed: {done.stderr.strip()}"
        )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True, timeout=30)


@pytest.fixture(scope="module")
def live(mounted: Path) -> Iterator[LiveServer]:
    server = outcomes_server(mounted)
    assert server.data_dir == mounted / "data"
    server.add_project(write_settings_project(server.projects / "settings"), SETTINGS_PROJECT)
    with server.running():
        yield server


@pytest.fixture
def disk(live: LiveServer) -> Iterator[Disk]:
    d = Disk(live.data_dir)
    try:
        yield d
    finally:
        d.free()


@pytest.fixture(scope="module")
def key(live: LiveServer) -> str:
    return live.create_key("alice")


def storage_full(response: httpx2.Response) -> None:
    assert response.status_code == 507, response.text
    err = error_of(response)
    assert err["code"] == "storage_full"
    assert "storage is full" in err["message"]


def test_an_upload_on_a_full_disk_answers_507_storage_full_and_leaves_nothing_behind(
    live: LiveServer, key: str, disk: Disk
) -> None:
    before = (
        {p.name for p in (live.data_dir / "files").rglob("*")}
        if (live.data_dir / "files").exists()
        else set()
    )
    disk.fill()
    storage_full(upload(live, key, OUTCOMES, secrets.token_bytes(256 * 1024)))
    after = (
        {p.name for p in (live.data_dir / "files").rglob("*")}
        if (live.data_dir / "files").exists()
        else set()
    )
    assert after == before  # no temp file, no blob
    assert not [r for r in live.rows("managed_files") if r["project_id"] == OUTCOMES]
    disk.free()
    r = upload(live, key, OUTCOMES, b"fits now")
    assert r.status_code == 201, r.text


def test_a_configuration_write_on_a_full_disk_answers_507_storage_full_and_works_once_freed(
    live: LiveServer, disk: Disk
) -> None:
    admin = {"Authorization": f"Bearer {live.admin_key}"}
    body = {
        "name": f"full-{secrets.token_hex(3)}",
        "values": {"endpoint": "https://full.example", "token": "t"},
    }
    disk.fill()
    r = httpx2.post(f"{live.base_url}{CONFIGS}", json=body, headers=admin, timeout=TIMEOUT)
    storage_full(r)
    disk.free()
    assert body["name"] not in {row["name"] for row in live.rows("project_configs")}
    r = httpx2.post(f"{live.base_url}{CONFIGS}", json=body, headers=admin, timeout=TIMEOUT)
    assert r.status_code == 201, r.text


async def test_an_answer_on_a_full_disk_answers_507_storage_full_and_the_question_stays_answerable(
    live: LiveServer, key: str, disk: Disk
) -> None:
    async with sdk_client(live.mcp_url(INTERACTIVE), key, "legacy") as client:
        parked = payload(await client.call_tool("plan_trip", {"traveller": "full"}))
    assert parked["status"] == "waiting_for_input"
    url = f"{live.base_url}/api/interactions/{parked['error']['interactionId']}/answer"
    answer = {"action": "accept", "content": {"destination": "Oslo", "nights": 2}}
    headers = {"Authorization": f"Bearer {key}"}
    disk.fill()
    storage_full(httpx2.post(url, json=answer, headers=headers, timeout=TIMEOUT))
    disk.free()
    r = httpx2.post(url, json=answer, headers=headers, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["data"]["repeated"] is False  # the refused answer left nothing behind


async def test_a_run_finishing_on_a_full_disk_gives_its_real_result_and_is_recorded_once_space_is_freed(
    live: LiveServer, key: str, disk: Disk, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    answer = secrets.token_hex(8)
    started = anyio.Event()
    results: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message == "waiting for the gate":
            started.set()

    with anyio.fail_after(TIMEOUT):
        async with (
            sdk_client(live.mcp_url(OUTCOMES), key, "legacy") as client,
            anyio.create_task_group() as tg,
        ):

            async def call() -> None:
                arguments = {"gate": str(gate), "answer": answer}
                results.append(await client.call_tool("gated", arguments, progress_callback=on_progress))

            tg.start_soon(call)
            await started.wait()
            disk.fill()
            gate.touch()
    (result,) = results
    body = payload(result)
    assert result.is_error is False, body
    assert body["output"] == {"answer": answer}
    run_id = body["runId"]
    try:
        with anyio.fail_after(TIMEOUT):
            assert await retried(live, run_id, 2) == "storage_full"
        assert stored_run(live, run_id)["status"] == "running"  # kept in memory, not written yet
    finally:
        disk.free()
    with anyio.fail_after(TIMEOUT):
        row = await stored(live, run_id)
    assert row["status"] == "success"
    assert row["output"] == body["output"]


async def test_a_tool_call_on_a_full_disk_is_told_the_storage_is_full(
    live: LiveServer, key: str, disk: Disk, tmp_path: Path
) -> None:
    async with sdk_client(live.mcp_url(OUTCOMES), key, "legacy") as client:
        disk.fill()
        try:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("gated", {"gate": str(tmp_path / "never"), "answer": "x"})
        finally:
            disk.free()
    assert "storage is full" in refused.value.error.message
    assert refused.value.error.data == {"code": "storage_full"}


def test_postgresql_disk_full_is_storage_full() -> None:
    exc = OperationalError(
        "INSERT ...", {}, psycopg.errors.DiskFull("could not extend file: No space left on device")
    )
    assert getattr(exc.orig, "sqlstate", None) == "53100"
    mapped = unavailable(exc)
    assert isinstance(mapped, StorageFull) and mapped.status == 507 and mapped.code == "storage_full"


def test_enospc_and_edquot_on_a_file_write_are_storage_full() -> None:
    for code in (errno.ENOSPC, errno.EDQUOT):
        assert isinstance(unavailable(OSError(code, os.strerror(code))), StorageFull)
    assert unavailable(OSError(errno.EACCES, "denied")) is None

"""The worker model against hostile workflow code: no server secret or data within its
reach, nothing it starts outlives its run, and no message it sends can hang the run or be
reported as a crash. Real worker processes throughout, and a real `steamharness serve` for
what a handler can see of the server."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests import processes
from tests.e2e.server import STEAMHARNESS, LiveServer, free_port, make_server
from tests.helpers import WAIT, needs_root, next_update, process_gone, run_to_end, start_run, wait_until_gone
from tests.security.workers_project import PROJECT_ID, write_project
from webui.errors import ConfigError
from webui.runs.env import server_base_env
from webui.runs.messages import LOG_TEXT_LIMIT, MAX_FRAME_BYTES, PROGRESS_MESSAGE_LIMIT
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.workflows.project import Project, load_project

# The handlers here search every process's /proc environ and cmdline for the server's
# secrets: the servers are real execs (a fork server's child shows the fork server's).
pytestmark = [pytest.mark.anyio, pytest.mark.exec_processes]
# Only a server running as root switches its workers to the worker user (a non-root server
# has no other user to switch to), so these tests need a root test run; CI runs as root.

NOBODY = pwd.getpwnam("nobody")
TOO_BIG = MAX_FRAME_BYTES + 1
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)


# ------------------------------------------------------------------------------ in-process


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Module-wide, so the run service below serves every test of the module on one loop."""
    return "asyncio"


@pytest.fixture(scope="module")
async def svc(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Services]:
    """One run service and worker pool for the module's in-process tests (opening them costs
    seconds on a loaded machine): each test starts runs of its own and asserts on those."""
    data_dir = tmp_path_factory.mktemp("workers") / "data"
    async with open_services(Settings(data_dir=data_dir, kill_grace_seconds=0.5)) as services:
        yield services


@pytest.fixture
def intruder(tmp_path: Path) -> Project:
    return load_project(write_project(tmp_path / "intruder"))


def events(svc: Services, run_id: str, kind: str) -> list[run_store.RunEvent]:
    return [e for e in run_store.list_events(svc.engine, run_id=run_id) if e.kind == kind]


async def progress_message(svc: Services, run_id: str) -> str:
    update = await next_update(svc, run_id, ("progress",))
    assert update.progress is not None
    return str(update.progress["message"])


# -------------------------------------------------------------------- who the handler is


@needs_root
async def test_workflow_code_runs_as_the_worker_user_without_groups_or_a_way_back_up(
    svc: Services, intruder: Project
) -> None:
    final = await run_to_end(svc, intruder, "identity")
    assert final.status == "success", final.error
    out = final.output
    base, count = Settings().worker_uid_base, Settings().worker_uid_count
    uid = out["uid"][0]
    assert base <= uid < base + count  # a uid of its own, from the per-run range
    assert out["uid"] == [uid] * 3
    assert out["gid"] == [uid] * 3
    assert out["groups"] == []
    assert out["noNewPrivs"] == "1"
    assert out["dumpable"] == 0
    assert out["user"] == f"run{uid - base}"


@needs_root
async def test_with_the_uid_range_off_workflow_code_runs_as_the_worker_user(
    tmp_path: Path, intruder: Project
) -> None:
    settings = Settings(data_dir=tmp_path / "data", worker_uid_count=0)
    async with open_services(settings) as svc:
        final = await run_to_end(svc, intruder, "identity")
    assert final.status == "success", final.error
    out = final.output
    assert out["uid"] == [NOBODY.pw_uid] * 3
    assert out["gid"] == [NOBODY.pw_gid] * 3
    assert out["groups"] == []
    assert out["dumpable"] == 0  # other runs share the user: they cannot read this one
    assert out["user"] == "nobody"


@needs_root
async def test_an_empty_worker_user_is_the_explicit_way_to_keep_root(
    tmp_path: Path, intruder: Project
) -> None:
    settings = Settings(data_dir=tmp_path / "data", worker_user="")
    async with open_services(settings) as svc:
        final = await run_to_end(svc, intruder, "identity")
    assert final.status == "success", final.error
    assert final.output["uid"] == [0, 0, 0]
    # Forked from the zygote without a drop: it inherits the zygote's non-dumpable state.
    assert final.output["dumpable"] == 0


def test_a_hardened_server_process_is_not_dumpable() -> None:
    code = (
        "import ctypes; from webui.runs.isolation import harden_process; harden_process();"
        " print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    out = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert out.stdout.strip() == "0", out.stderr


@needs_root
@pytest.mark.parametrize(
    ("user", "message"),
    [("no-such-user-here", "worker user 'no-such-user-here' does not exist"), ("root", "is root")],
)
async def test_a_missing_or_root_worker_user_stops_start_up_before_anything_is_created(
    tmp_path: Path, user: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        async with open_services(Settings(data_dir=tmp_path / "data", worker_user=user)):
            pass
    assert not (tmp_path / "data").exists()


@needs_root
def test_serve_with_a_missing_worker_user_exits_with_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    env["STEAMHARNESS_WORKER_USER"] = "no-such-user-here"
    proc = processes.run(
        [STEAMHARNESS, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "worker user 'no-such-user-here' does not exist" in lines[0], proc.stderr


async def test_a_worker_inherits_no_server_secret_in_its_own_or_its_parents_environ(
    tmp_path: Path, intruder: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEAMHARNESS_SERVER_ADMIN_KEY", "k" * 40)
    monkeypatch.setenv("STEAMHARNESS_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    monkeypatch.setenv("SOME_HOST_TOKEN", "t0ken")
    async with open_services(Settings(data_dir=tmp_path / "data")) as svc:
        run_id = await start_run(svc, intruder, "leave_and_wait")
        await progress_message(svc, run_id)
        pid = svc.runs.live_worker_pid(run_id)
        assert pid is not None
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            zygote = int(fh.read().rpartition(")")[2].split()[1])
        try:
            # What the worker (and everything it execs without an env of its own) started
            # with, and its parent's: the zygote's, which every worker inherits.
            for who in (pid, zygote):
                environ = Path(f"/proc/{who}/environ").read_bytes()
                for secret in (b"STEAMHARNESS_", b"k" * 40, b"db.sqlite3", b"t0ken"):
                    assert secret not in environ, (who, secret)
        finally:
            await svc.runs.cancel(run_id)


def test_runs_of_serve_get_only_an_allowlist_of_the_server_environment() -> None:
    environ = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "HOME": "/root",
        "STEAMHARNESS_SERVER_ADMIN_KEY": "k" * 40,
        "STEAMHARNESS_DATABASE_URL": "postgresql://u:secret@db/x",
        "GITHUB_TOKEN": "ghp_x",
        "OPENAI_API_KEY": "sk-x",
    }
    assert server_base_env(environ) == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC"}
    passed = server_base_env(environ, ["OPENAI_API_KEY", "STEAMHARNESS_SERVER_ADMIN_KEY"])
    assert passed["OPENAI_API_KEY"] == "sk-x"
    assert not any(k.startswith("STEAMHARNESS_") for k in passed)


# -------------------------------------------------------------------------- scratch dirs


@needs_root
async def test_each_run_gets_a_private_scratch_dir_as_home_and_tmpdir_removed_when_it_ends(
    svc: Services, intruder: Project
) -> None:
    first = await run_to_end(svc, intruder, "scratch")
    second = await run_to_end(svc, intruder, "scratch")
    for final in (first, second):
        assert final.status == "success", final.error
        out = final.output
        assert out["tmpdir"] == out["home"] == out["tempfile"]
        assert (out["owner"], out["mode"]) == (out["uid"], 0o700)
        assert out["uid"] not in (0, NOBODY.pw_uid)  # the run's own uid
        assert out["cwd"] == str(intruder.root)  # the project folder stays the working directory
    assert first.output["tmpdir"] != second.output["tmpdir"]
    scratch_root = Path(first.output["tmpdir"]).parent
    assert stat.S_IMODE(scratch_root.stat().st_mode) == 0o711  # enter your own, list nobody's
    with anyio.fail_after(10):
        while any(Path(f.output["tmpdir"]).exists() for f in (first, second)):
            await anyio.sleep(0.02)  # removed by the pool once the zygote reports the exit


async def test_a_link_to_a_server_file_is_refused_as_a_created_output(
    svc: Services, intruder: Project
) -> None:
    target = svc.settings.keys_dir / "fingerprint.key"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"server secret")
    final = await run_to_end(svc, intruder, "smuggle", {"target": str(target)})
    assert final.status == "success", final.error
    assert final.output["refused"] == "files.create: the file must be written by ctx.files.create"
    assert final.output["honest"] == len("made by the handler")
    assert target.read_bytes() == b"server secret"


# -------------------------------------------------------------------- nothing left behind


@pytest.mark.parametrize("how", ["setsid", "double_fork", "daemonise"])
async def test_what_a_handler_leaves_running_is_gone_when_its_result_arrives(
    svc: Services, intruder: Project, how: str
) -> None:
    final = await run_to_end(svc, intruder, "leave", {"how": how})
    assert final.status == "success", final.error
    assert process_gone(final.output["pid"])


async def test_a_crashed_worker_leaves_nothing_behind(svc: Services, intruder: Project) -> None:
    run_id = await start_run(svc, intruder, "leave_and_crash")
    leftover = int(await progress_message(svc, run_id))
    final = await next_update(svc, run_id)
    assert final.status == "failed" and final.error is not None
    assert "exited with code 3" in final.error["message"]
    assert process_gone(leftover)


async def test_cancelling_kills_what_the_handler_started_in_another_session(
    svc: Services, intruder: Project
) -> None:
    run_id = await start_run(svc, intruder, "leave_and_wait")
    leftover = int(await progress_message(svc, run_id))
    worker = svc.runs.live_worker_pid(run_id)
    assert worker is not None
    await svc.runs.cancel(run_id, reason="stop")
    run = run_store.get_run(svc.engine, run_id=run_id)
    assert run is not None and run.status == "cancelled"
    assert process_gone(leftover) and process_gone(worker)


async def test_a_process_cloned_as_the_workers_sibling_is_killed_by_the_zygote(
    svc: Services, intruder: Project
) -> None:
    final = await run_to_end(svc, intruder, "sibling")
    assert final.status == "success", final.error
    out = final.output
    assert out["pid"] > 0
    # The sibling is the zygote's child, not the worker's: the zygote kills it once the
    # worker is gone (after the result, so this is a bounded wait, not an assertion at once).
    await wait_until_gone([out["pid"]])


# ------------------------------------------------------------------------ oversized frames


async def test_an_output_over_the_frame_limit_fails_the_run_with_output_too_large(
    svc: Services, intruder: Project
) -> None:
    final = await run_to_end(svc, intruder, "big_output", {"size": TOO_BIG})
    assert final.status == "failed"
    assert final.error is not None and final.error["code"] == "output_too_large"
    assert "over the 16 MB limit" in final.error["message"]


async def test_a_huge_log_line_is_cut_and_the_run_succeeds(svc: Services, intruder: Project) -> None:
    run_id = await start_run(svc, intruder, "big_log", {"size": 2 * MAX_FRAME_BYTES})
    final = await next_update(svc, run_id)
    assert (final.status, final.output) == ("success", {"ok": True})
    [entry] = events(svc, run_id, "log")
    assert entry.text is not None and entry.text.startswith("l" * LOG_TEXT_LIMIT)
    assert entry.text.endswith(f"[cut: {2 * MAX_FRAME_BYTES - LOG_TEXT_LIMIT} more characters]")


async def test_a_huge_progress_message_is_cut_and_the_run_succeeds(svc: Services, intruder: Project) -> None:
    run_id = await start_run(svc, intruder, "big_progress", {"size": 2 * MAX_FRAME_BYTES})
    message = await progress_message(svc, run_id)
    assert message.startswith("p" * PROGRESS_MESSAGE_LIMIT) and message.endswith("more characters]")
    final = await next_update(svc, run_id)
    assert final.status == "success"


async def test_an_ask_too_large_to_send_fails_the_run_with_output_too_large(
    svc: Services, intruder: Project
) -> None:
    final = await run_to_end(svc, intruder, "big_ask", {"size": TOO_BIG})
    assert final.status == "failed" and final.error is not None
    assert final.error["code"] == "output_too_large"
    assert "ctx ask" in final.error["message"]


async def test_an_oversized_frame_written_to_the_socket_directly_kills_the_worker(
    svc: Services, intruder: Project
) -> None:
    run_id = await start_run(svc, intruder, "raw_frame", {"size": TOO_BIG})
    worker = int(await progress_message(svc, run_id))
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert final.error == {
        "code": "output_too_large",
        "message": "The worker sent a message over the 16 MB limit.",
    }
    assert process_gone(worker)


async def test_a_malformed_frame_kills_the_worker_and_fails_the_run(svc: Services, intruder: Project) -> None:
    run_id = await start_run(svc, intruder, "garbage_frame")
    worker = int(await progress_message(svc, run_id))
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert final.error == {"code": "handler_error", "message": "The worker sent a malformed message."}
    assert process_gone(worker)


# --------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    # Not under pytest's private tmp dir: the data dir's own mode must be what keeps
    # workers out, not a parent directory's.
    base = Path(tempfile.mkdtemp(prefix="sh-workers-"))
    os.chmod(base, 0o755)
    try:
        server = make_server(base)
        server.add_project(write_project(server.projects / "intruder"), PROJECT_ID)
        with server.running():
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def call(live: LiveServer, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    headers = {"Authorization": f"Bearer {live.admin_key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        with anyio.fail_after(TIMEOUT):
            url = live.mcp_url(PROJECT_ID)
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                return await client.call_tool(tool, arguments)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.content[0], types.TextContent)
    return json.loads(result.content[0].text)


@needs_root
async def test_a_handler_of_a_served_project_finds_no_admin_key_and_no_data(live: LiveServer) -> None:
    result = await call(live, "probe", {"dataDir": str(live.data_dir)})
    assert not result.is_error, result
    out = structured(result)["output"]
    assert out["markerSeen"]  # the scan does see environments it may read
    assert out["adminKeyIn"] == []
    # Its own snapshot is in the data dir: the folders on the way to it are all it lists (in
    # its filesystem view they show nothing else), its own files all it reads.
    cwd = out["cwd"]
    assert cwd.startswith(f"{live.data_dir}/")
    theirs = [
        p for p in out["readable"] if not (p == cwd or p.startswith(f"{cwd}/") or cwd.startswith(f"{p}/"))
    ]
    assert theirs == []
    assert out["uid"] not in (0, NOBODY.pw_uid)  # a per-run uid
    assert not [name for name in out["envNames"] if name.startswith("STEAMHARNESS_")]
    assert live.admin_key not in json.dumps(out)


def test_the_data_dir_is_private_and_its_database_and_keys_are_owner_only(live: LiveServer) -> None:
    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(live.data_dir) == 0o700
    assert mode(live.data_dir / "keys") == 0o700
    assert mode(live.data_dir / "steamharness.sqlite3") == 0o600
    keys = list((live.data_dir / "keys").iterdir())
    assert keys and all(mode(k) == 0o600 for k in keys)
    for side in live.data_dir.glob("steamharness.sqlite3-*"):
        assert mode(side) == 0o600, side


async def test_a_tool_output_over_the_frame_limit_is_an_output_too_large_tool_error(live: LiveServer) -> None:
    result = await call(live, "big_output", {"size": TOO_BIG})
    assert result.is_error
    error = structured(result)["error"]
    assert error["code"] == "output_too_large"
    assert "over the 16 MB limit" in error["message"]

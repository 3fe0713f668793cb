"""A run sees its own project's files and nothing beside them: a filesystem view of its
own (webui.runs.view) holding the interpreter's files, its project (for a draft, the
author's folder), its scratch dir and a private /tmp. The attack of issue 36: projects
registered one by one (`projects add`, so no projects dir is closed to other users) in
folders readable by everyone, and a handler that walks everything it can reach from `/`
and from each parent of its folder, at the draft and the published target of a real
server and over stdio. Then what the run's /tmp is (whatever the host's holds or allows),
the operator's read paths, and the fallback where no view can be built."""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from tests import processes
from tests.conftest import server_env
from tests.e2e.server import LiveServer, free_port
from tests.helpers import WAIT, needs_root, run_to_end
from tests.security.isolation_project import (
    SECRET,
    VICTIM_ID,
    WALKER_ID,
    account_key,
    call_tool,
    write_victim,
    write_walker,
)
from tests.support import InProcessServer
from webui.errors import ConfigError
from webui.runs.isolation import read_paths, zygote_env
from webui.runs.pool import WorkerPool
from webui.runs.view import SYSTEM_ETC, SYSTEM_TOP
from webui.services import open_services
from webui.settings import Settings
from webui.workflows.project import load_project

pytestmark = [pytest.mark.anyio, needs_root]


# ------------------------------------------------------------------ what may be seen


def interpreter_paths() -> list[str]:
    """What the workers' interpreter reads (webui.runs.view.interpreter_paths), asked of
    the interpreter as the zygote runs it (this one's import path is pytest's)."""
    code = "import json, webui.runs.view as v; print(json.dumps(v.interpreter_paths()))"
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=WAIT,
        env=zygote_env(server_env()),
    )
    return json.loads(out.stdout)


def allowed_paths() -> list[str]:
    """Everything a view may show whole: the interpreter's files, the system's folders and
    the /etc entries it binds, /dev, /proc (the host's), the run's own /var/tmp. Not /tmp: the run's own too,
    but it must show nothing but the way to the run's folders."""
    found = [f"/{n}" for n in SYSTEM_TOP] + [f"/etc/{n}" for n in SYSTEM_ETC] + interpreter_paths()
    found += ["/dev", "/proc", "/var/tmp"]
    return sorted({os.path.normpath(p) for p in found} | {os.path.realpath(p) for p in found})


def on_the_way(path: str, folder: str) -> bool:
    """`path` is `folder`, inside it, or one of its parents."""
    return path == folder or path.startswith(folder.rstrip("/") + "/") or folder.startswith(path + "/")


def beyond(out: dict[str, Any], allowed: list[str]) -> list[str]:
    """What the survey reached besides what may be shown whole and the names on the way to
    it (or to the run's own folders)."""
    shown = [*allowed, out["cwd"], out["home"]]
    found = [f"read {path}" for path in out["files"]]
    found += [f"link {path}" for path in out["links"] if not any(on_the_way(path, s) for s in shown)]
    for folder, names in out["folders"].items():
        for name in names:
            path = os.path.join(folder, name)
            if not any(on_the_way(path, s) for s in shown):
                found.append(path)
    return found


def check_view(out: dict[str, Any], allowed: list[str], own_name: str) -> None:
    assert out["uid"] != 0
    assert out["up"] == [own_name]  # `..`: its own folder, nothing beside it
    assert beyond(out, allowed) == []
    assert out["reached"] == []
    assert SECRET not in json.dumps(out)
    # Its /tmp: only the way to its own folders, none of the host's.
    scratch_top = out["home"].split("/")[2] if out["home"].startswith("/tmp/") else None
    cwd_top = out["cwd"].split("/")[2] if out["cwd"].startswith("/tmp/") else None
    assert set(out["folders"]["/tmp"]) <= {scratch_top, cwd_top, *tmp_tops(allowed)} - {None}


def tmp_tops(paths: list[str]) -> set[str]:
    """The names at the top of /tmp on the way to `paths` (a checkout and its venv may live
    in /tmp: the interpreter's files are shown at their own paths)."""
    return {p.split("/")[2] for p in paths if p.startswith("/tmp/")}


# ------------------------------------------------------------------ a real server (in this process)


@pytest.fixture(scope="module")
def allowed() -> list[str]:
    return allowed_paths()


@pytest.fixture(scope="module")
def planted() -> Iterator[Path]:
    """A file anyone may read at the top of the host's /tmp: no run's /tmp has it."""
    path = Path(tempfile.gettempdir()) / f"sh-view-planted-{secrets.token_hex(6)}"
    path.write_text(SECRET, encoding="utf-8")
    os.chmod(path, 0o644)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def write_neighbours(base: Path) -> dict[str, Path]:
    """The walker (alpha) and, beside it, a project it has no grant on (gamma: a .env and
    notes readable by everyone) and a folder that is no project: all in folders anyone may
    list, the way `projects add` finds them in a home directory."""
    for folder in (base, base / "projects"):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o755)
    alpha = write_walker(base / "projects" / "alpha")
    gamma = write_victim(base / "projects" / "gamma")
    stray = base / "projects" / "stray"
    stray.mkdir()
    (stray / "secret.txt").write_text(SECRET, encoding="utf-8")
    (base / "planted.txt").write_text(SECRET, encoding="utf-8")
    for path in [base, *base.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return {"alpha": alpha, "gamma": gamma, "stray": stray}


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    base = Path(tempfile.mkdtemp(prefix="sh-view-"))
    try:
        folders = write_neighbours(base)
        admin_key = secrets.token_urlsafe(32)
        server = InProcessServer(
            data_dir=base / "data",
            projects=base / "projects",
            port=free_port(),
            admin_key=admin_key,
            env={**server_env(), "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key},
        )
        # `projects add` each, no --projects-dir: nothing closes their parent folder.
        server.add_project(folders["alpha"], WALKER_ID)
        server.add_project(folders["gamma"], VICTIM_ID)
        for user, project_id in (("alice", WALKER_ID), ("bob", VICTIM_ID)):
            server.add_user(user)
            server.grant(user, [project_id])
        with server.running():
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def probes(live: LiveServer, planted: Path) -> list[str]:
    base = live.projects.parent
    shared = live.settings().resolved_shared_dir
    return [
        # Through the server's own /proc entry (it runs in this process): its root is the host's.
        f"/proc/{os.getpid()}/root{live.projects}/gamma/.env",
        str(live.projects / "gamma" / ".env"),
        str(live.projects / "gamma" / "notes.txt"),
        str(live.projects / "gamma"),
        str(live.projects / "stray" / "secret.txt"),
        str(base / "planted.txt"),
        str(shared / "versions" / VICTIM_ID / "1.0.0" / ".env"),
        str(live.data_dir / "steamharness.sqlite3"),
        str(planted),
    ]


async def test_a_draft_run_of_a_project_added_alone_sees_nothing_beside_its_folder(
    live: LiveServer, allowed: list[str], planted: Path
) -> None:
    alice = account_key(live, "alice", WALKER_ID)
    arguments = {"allowed": allowed, "probe": probes(live, planted)}
    out = (await call_tool(live, alice, WALKER_ID, "survey", arguments, target="draft"))["output"]
    assert out["cwd"] == str(live.projects / "alpha")
    check_view(out, allowed, "alpha")


async def test_a_published_run_sees_nothing_beside_its_snapshot(
    live: LiveServer, allowed: list[str], planted: Path
) -> None:
    alice = account_key(live, "alice", WALKER_ID)
    arguments = {"allowed": allowed, "probe": probes(live, planted)}
    out = (await call_tool(live, alice, WALKER_ID, "survey", arguments))["output"]
    assert out["cwd"].endswith(f"/versions/{WALKER_ID}/1.0.0")
    check_view(out, allowed, "1.0.0")


async def test_a_stdio_run_sees_nothing_beside_the_folder_it_serves(
    allowed: list[str], planted: Path
) -> None:
    base = Path(tempfile.mkdtemp(prefix="sh-view-stdio-"))
    try:
        folders = write_neighbours(base)
        data = base / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
        command, args = processes.stdio_command(["mcp", str(folders["alpha"]), "--data-dir", str(data)])
        params = StdioServerParameters(command=command, args=args, env=env)
        arguments = {
            "allowed": allowed,
            "probe": [
                str(folders["gamma"] / ".env"),
                str(folders["stray"] / "secret.txt"),
                str(base / "planted.txt"),
                str(data / "steamharness.sqlite3"),
                str(planted),
            ],
        }
        with anyio.fail_after(240):
            async with Client(params, mode="legacy") as client:
                result = await client.call_tool("survey", arguments)
        assert isinstance(result.content[0], types.TextContent)
        assert not result.is_error, result.content[0].text
        out = json.loads(result.content[0].text)["output"]
        assert out["cwd"] == str(folders["alpha"])
        check_view(out, allowed, "alpha")
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ in process

PROJECT_ID = "3c5e7a9b-1d2f-4b6a-8c0e-2f4a6c8e0b1d"
TMP_BYTES = 4 * 1024 * 1024

TEMP_HANDLERS = r"""
import errno
import os

RUN_TMP = "/tmp"  # the run's own, private /tmp


def temp(ctx):
    out = {}
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        st = os.stat(folder)
        vfs = os.statvfs(folder)
        out[folder] = {
            "mode": st.st_mode & 0o7777,
            "dev": st.st_dev,
            "names": sorted(os.listdir(folder)),
            "bytes": vfs.f_blocks * vfs.f_frsize,
        }
        try:
            with open(os.path.join(folder, ctx.params["tag"]), "w") as fh:
                fh.write("mine")
            out[folder]["wrote"] = True
        except PermissionError:  # the host's, closed to the run (only without a view)
            out[folder]["wrote"] = False
    out["home"] = os.environ["HOME"]
    if ctx.params["size"]:
        try:
            with open(os.path.join(RUN_TMP, "big"), "wb") as fh:  # the run's own /tmp
                fh.write(b"x" * (ctx.params["size"] + 4096))
            out["big"] = "written"
        except OSError as exc:
            out["big"] = errno.errorcode[exc.errno]
    shared = ctx.params["shared"]
    with open(shared) as fh:
        out["shared"] = fh.read()
    try:
        with open(shared, "a") as fh:
            fh.write("changed")
        out["sharedWrite"] = "written"
    except OSError as exc:
        out["sharedWrite"] = errno.errorcode[exc.errno]
    return out
"""


ESCAPE_HANDLERS = r"""
import ctypes
import errno
import json
import os

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000


def _tries():
    libc = ctypes.CDLL(None, use_errno=True)

    def call(result):
        return "done" if result == 0 else errno.errorcode[ctypes.get_errno()]

    def attempt(op):
        try:
            op()
            return "done"
        except OSError as exc:
            return errno.errorcode[exc.errno]

    out = {
        "mount": call(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)),
        "umount": call(libc.umount2(b"/usr", 2)),
        "chroot": attempt(lambda: os.chroot("/tmp")),
        "initRoot": attempt(lambda: os.listdir("/proc/1/root")),
        # A user namespace would give it every capability over a copy of its mounts.
        "userns": call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)),
    }
    os.chdir("/")
    for _ in range(64):
        os.chdir("..")
    out["top"] = sorted(os.listdir("."))
    return out


def escape(ctx):
    # From a process of its own: a user namespace is refused to any multi-threaded one.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(_tries()).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return {**json.loads(data), "root": sorted(os.listdir("/"))}
"""


def temp_project(folder: Path) -> Path:
    folder.mkdir()
    params = [
        {"name": "tag", "type": "string"},
        {"name": "size", "type": "number"},
        {"name": "shared", "type": "string"},
    ]
    package = {
        "id": PROJECT_ID,
        "name": "temp",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "temp", "handler": "h.py:temp", "params": params, "timeoutSeconds": 60},
            {"id": "escape", "handler": "escape.py:escape", "timeoutSeconds": 60},
        ],
    }
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (folder / "h.py").write_text(TEMP_HANDLERS, encoding="utf-8")
    (folder / "escape.py").write_text(ESCAPE_HANDLERS, encoding="utf-8")
    return folder


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """An operator's folder every run reads (STEAMHARNESS_WORKER_READ_PATHS)."""
    folder = Path(tempfile.mkdtemp(prefix="sh-view-read-"))
    os.chmod(folder, 0o777)  # writable by everyone on the host: the view keeps it read-only
    (folder / "model.txt").write_text("weights", encoding="utf-8")
    os.chmod(folder / "model.txt", 0o666)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_runs_temporary_folders_are_its_own_bounded_and_gone_with_it(
    tmp_path: Path, shared_folder: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", worker_tmp_max_bytes=TMP_BYTES, worker_read_paths=[str(shared_folder)]
    )
    project = load_project(temp_project(tmp_path / "temp"))
    host_tmp = os.stat("/tmp").st_dev
    tag = f"sh-view-{secrets.token_hex(6)}"
    params = {"tag": tag, "size": TMP_BYTES, "shared": str(shared_folder / "model.txt")}
    try:
        async with open_services(settings) as svc:
            first = await run_to_end(svc, project, "temp", params)
            assert first.status == "success", first.error
            second = await run_to_end(svc, project, "temp", params)
            assert second.status == "success", second.error
    finally:
        for folder in ("/tmp", "/var/tmp", "/dev/shm"):
            (Path(folder) / tag).unlink(missing_ok=True)
    for out in (first.output, second.output):
        for folder in ("/tmp", "/var/tmp", "/dev/shm"):
            seen = out[folder]
            assert seen["mode"] == 0o1777, folder  # whatever the host's is
            assert seen["wrote"], folder
            assert seen["dev"] != host_tmp, folder  # not the host's /tmp
            assert seen["bytes"] == TMP_BYTES, folder  # one bounded tmpfs
            assert tag not in seen["names"]  # the first run's file went with it
        assert out["/var/tmp"]["names"] == [] and out["/dev/shm"]["names"] == []
        # Only the way to its own folders and the read path (all under the host's /tmp here).
        ways = {Path(out["home"]).parts[2], tmp_path.parts[2], shared_folder.parts[2]}
        assert out["/tmp"]["names"] == sorted(ways | tmp_tops(allowed_paths()))
        assert out["big"] == "ENOSPC"
        assert out["shared"] == "weights"
        assert out["sharedWrite"] == "EROFS"
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not (Path(folder) / tag).exists()  # never written to the host's
    assert (shared_folder / "model.txt").read_text(encoding="utf-8") == "weights"


# A host whose /tmp, /var/tmp and /dev/shm are 0755 (only root may create in them), made
# for one process: a mount namespace of its own with such tmpfs mounts over them. In it,
# a server's runs (its zygote and workers inherit the namespace) write their own.
CLOSED_TMP_HOST = r"""
import asyncio, ctypes, json, os, sys
from pathlib import Path

libc = ctypes.CDLL(None, use_errno=True)
assert libc.unshare(0x00020000) == 0, os.strerror(ctypes.get_errno())
assert libc.mount(None, b"/", None, ctypes.c_ulong(16384 | (1 << 18)), None) == 0
for folder in (b"/tmp", b"/var/tmp", b"/dev/shm"):
    data = b"mode=0755,size=16m"
    assert libc.mount(b"tmpfs", folder, b"tmpfs", ctypes.c_ulong(0), data) == 0, folder
given = json.loads(sys.stdin.read())
project = Path("/tmp/closed-host/temp")
project.mkdir(parents=True)
for name, text in given["files"].items():
    (project / name).write_text(text, encoding="utf-8")
os.chmod("/tmp/closed-host", 0o755)

from tests.helpers import run_to_end
from webui.services import open_services
from webui.settings import Settings
from webui.workflows.project import load_project


async def main():
    settings = Settings(data_dir=Path("/tmp/closed-host/data"))
    async with open_services(settings) as svc:
        final = await run_to_end(svc, load_project(project), "temp", given["params"])
    print(json.dumps({"status": str(final.status), "error": final.error, "output": final.output}))


asyncio.run(main())
"""


def test_runs_write_their_temporary_folders_on_a_host_whose_own_are_closed(tmp_path: Path) -> None:
    here = Path(__file__).resolve()
    if any(p == "/tmp" or p.startswith(("/tmp/", "/var/tmp/", "/dev/shm/")) for p in (sys.prefix, str(here))):
        # The test closes the host's /tmp, /var/tmp and /dev/shm (0755): a checkout or venv
        # inside them would be closed to the runs it starts, whatever the code under test does.
        pytest.skip(
            "the interpreter or the checkout lives in /tmp, /var/tmp or /dev/shm, which this test closes"
        )
    folder = temp_project(tmp_path / "temp")
    files = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()}
    given = {"files": files, "params": {"tag": "mine", "size": 0, "shared": "package.json"}}
    env = {**server_env(), "PYTHONPATH": str(here.parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", CLOSED_TMP_HOST],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "success", result["error"]
    for name in ("/tmp", "/var/tmp", "/dev/shm"):
        assert result["output"][name]["mode"] == 0o1777, name
        assert result["output"][name]["wrote"], name


async def test_a_run_can_neither_mount_nor_leave_its_view(tmp_path: Path, allowed: list[str]) -> None:
    project = load_project(temp_project(tmp_path / "temp"))
    async with open_services(Settings(data_dir=tmp_path / "data")) as svc:
        final = await run_to_end(svc, project, "escape")
    assert final.status == "success", final.error
    out = final.output
    assert (out["mount"], out["umount"], out["chroot"]) == ("EPERM", "EPERM", "EPERM")
    assert out["initRoot"] == "EACCES"
    assert out["userns"] == "EPERM"  # refused in a chroot
    assert out["top"] == out["root"]  # `..` from `/` is `/`: the view's
    tops = {p.split("/")[1] for p in [*allowed, str(tmp_path), "/etc", "/tmp", "/var/tmp"]}
    assert set(out["root"]) <= tops


async def test_where_no_view_can_be_built_runs_go_on_and_the_server_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A zygote whose view cannot be built (here: its template folder is missing; on a host,
    # no CAP_SYS_ADMIN or a seccomp filter): runs keep the host's filesystem, with a warning.
    argument = WorkerPool._view_argument

    def broken(self: WorkerPool) -> list[str]:
        config = json.loads(argument(self)[0])
        return [json.dumps({**config, "template": str(tmp_path / "missing")})]

    monkeypatch.setattr(WorkerPool, "_view_argument", broken)
    project = load_project(temp_project(tmp_path / "temp"))
    # Read from the working directory: without a view, the test's own folders are closed to it.
    params = {"tag": f"sh-view-{secrets.token_hex(6)}", "size": 0, "shared": "package.json"}
    caplog.set_level(logging.WARNING, logger="webui.runs.pool")
    try:
        async with open_services(Settings(data_dir=tmp_path / "data")) as svc:
            final = await run_to_end(svc, project, "temp", params)
            problem = svc.pool.view_problem
    finally:
        for folder in ("/tmp", "/var/tmp", "/dev/shm"):
            (Path(folder) / params["tag"]).unlink(missing_ok=True)
    assert final.status == "success", final.error
    assert final.output["/tmp"]["dev"] == os.stat("/tmp").st_dev  # the host's own
    assert problem is not None and "missing" in problem
    assert any("cannot have a filesystem view of their own" in r.getMessage() for r in caplog.records)


def test_read_paths_must_be_absolute_and_exist(tmp_path: Path) -> None:
    assert read_paths([str(tmp_path), f"{tmp_path}/"]) == (str(tmp_path), str(tmp_path))
    with pytest.raises(ConfigError, match="is not an absolute path"):
        read_paths(["relative/models"])
    with pytest.raises(ConfigError, match="does not exist"):
        read_paths([str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="the whole host"):
        read_paths(["/"])

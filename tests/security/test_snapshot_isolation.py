"""What a served run can reach of the disk: its own snapshot (or its own project folder,
for a draft) and its own scratch dir, nothing of another project, the database, the keys,
managed files or other runs. A real `serve` (as root, so workers drop to their own
users) with a shared dir apart from the data dir, laid out the way an older version left
it (0755 folders), and a handler that walks everything it can, called over MCP; then the
same over stdio."""

from __future__ import annotations

import json
import os
import shutil
import stat
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
from tests.e2e.server import LiveServer
from tests.helpers import needs_root
from tests.security.isolation_project import (
    SECRET,
    VICTIM_ID,
    WALKER_ID,
    account_key,
    call_tool,
    isolated_server,
    write_walker,
)

pytestmark = [
    pytest.mark.anyio,
    needs_root,
    # The walker reads the server's /proc entries: a real exec's (tests/processes.py).
    pytest.mark.exec_processes,
]


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    base = Path(tempfile.mkdtemp(prefix="sh-snapshots-"))
    try:
        server = isolated_server(base)
        with server.running():
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def shared_dir(live: LiveServer) -> Path:
    return Path(live.env["STEAMHARNESS_SHARED_DIR"])


# Read-only to every run and no secret: the checkout and the interpreter's files (where the
# checkout lives in /tmp, the walk would read all of it).
SKIP = sorted({str(Path(__file__).resolve().parents[2]), sys.prefix, os.path.realpath(sys.prefix)})


def walk_arguments(live: LiveServer) -> dict[str, Any]:
    data, shared = live.data_dir, shared_dir(live)
    watch = [str(data), str(shared), str(live.projects), tempfile.gettempdir()]
    probe = [
        str(data / "steamharness.sqlite3"),
        str(data / "keys"),
        str(data / "demo-api-key"),
        str(shared / "versions" / VICTIM_ID / "1.0.0" / ".env"),
        str(shared / "versions" / VICTIM_ID / "1.0.0" / "h.py"),
        str(shared / "files"),
        str(shared / "created-files"),
        str(live.projects / "victim" / ".env"),
        str(live.projects / "victim"),
    ]
    return {
        "roots": [str(data), str(shared), str(live.projects)],
        "watch": watch,
        "probe": probe,
        "skip": SKIP,
    }


def under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def outside_own(out: dict[str, Any], *guarded: Path) -> list[str]:
    """What the walk reached in the server's folders (`guarded`) or among the runs'
    scratch dirs, beyond its own working directory and its own scratch dir and the folders
    on the way to them (in its filesystem view, those list nothing else)."""
    scratch_root = os.path.dirname(out["home"])
    fenced = [str(g) for g in guarded] + [scratch_root]
    own = (out["cwd"], out["home"])
    return [
        path
        for path in out["listed"] + out["read"]
        if any(under(path, f) for f in fenced)
        and not any(under(path, o) or (under(o, path) and path in out["listed"]) for o in own)
    ]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_folders_an_older_version_left_open_are_private_after_start(live: LiveServer) -> None:
    shared = shared_dir(live)
    for folder in (shared, shared / "versions", shared / "versions" / VICTIM_ID, shared / "files"):
        assert mode(folder) == 0o700, folder
    assert mode(shared / "created-files") == 0o700
    assert mode(live.data_dir) == 0o700
    assert mode(live.projects) & 0o007 == 0  # a draft's `..`: closed to other users


async def test_a_published_run_reaches_only_its_own_snapshot_and_scratch(live: LiveServer) -> None:
    # The victim leaves a created file, a running program and a scratch dir behind it.
    bob = account_key(live, "bob", VICTIM_ID)
    held = await call_tool(live, bob, VICTIM_ID, "hold", {})
    assert held["error"]["code"] == "interaction_required", held
    alice = account_key(live, "alice", WALKER_ID)
    out = (await call_tool(live, alice, WALKER_ID, "walk", walk_arguments(live)))["output"]
    assert out["cwd"] == str(shared_dir(live) / "versions" / WALKER_ID / "1.0.0")
    assert f"{out['cwd']}/h.py" in out["read"]  # the walk does read what it may
    assert out["visits"] > 1000  # and it went far beyond its folder (`/usr`, ...)
    assert outside_own(out, live.data_dir, shared_dir(live), live.projects) == []
    assert not [p for p in out["listed"] + out["read"] if VICTIM_ID in p or "victim" in p]


async def test_a_draft_run_reaches_only_its_own_project_folder_and_scratch(live: LiveServer) -> None:
    alice = account_key(live, "alice", WALKER_ID)
    out = (await call_tool(live, alice, WALKER_ID, "walk", walk_arguments(live), target="draft"))["output"]
    assert out["cwd"] == str(live.projects / "walker")
    assert f"{out['cwd']}/h.py" in out["read"]
    assert outside_own(out, live.data_dir, shared_dir(live), live.projects) == []


# ---------------------------------------------------------------------------- over stdio


async def test_a_stdio_run_reaches_neither_the_data_dir_nor_other_runs(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="sh-stdio-"))
    try:
        os.chmod(base, 0o755)
        # A stdio server runs the folder it is given in place, in a filesystem view of its
        # own (tests/security/test_filesystem_view.py: nothing beside it is seen).
        walker = write_walker(base / "walker")
        data = base / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
        command, args = processes.stdio_command(["mcp", str(walker), "--data-dir", str(data)])
        params = StdioServerParameters(command=command, args=args, env=env)
        arguments = {
            "roots": [str(data)],
            "watch": [str(data), tempfile.gettempdir()],
            "probe": [str(data / "steamharness.sqlite3"), str(data / "keys")],
            "skip": SKIP,
        }
        with anyio.fail_after(240):
            async with Client(params, mode="legacy") as client:
                result = await client.call_tool("walk", arguments)
        assert isinstance(result.content[0], types.TextContent)
        assert not result.is_error, result.content[0].text
        out = json.loads(result.content[0].text)["output"]
        assert out["uid"] != 0
        assert f"{out['cwd']}/h.py" in out["read"]
        assert outside_own(out, data) == []
        assert SECRET not in json.dumps(out)
    finally:
        shutil.rmtree(base, ignore_errors=True)

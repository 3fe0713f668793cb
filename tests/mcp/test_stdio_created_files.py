"""Files a run creates (ctx.files.create) land in the created-files folder and the tool
result names them: what `steamharness mcp` serves driven by the Python SDK client in memory
(tests/support/memory.py); a bad `--file-create-store-dir` through the real process."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import processes
from tests.conftest import EXAMPLES, FIXTURES
from tests.helpers import WAIT
from tests.mcp.test_stdio_protocol import STEAMHARNESS, in_memory, payload

pytestmark = pytest.mark.anyio

PROJECT = FIXTURES / "created_files"
PROJECT_ID = "3ebf4d56-a06e-431d-b27f-977f9639e30b"


def stored_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


# As root the worker runs as `nobody`; an empty worker user keeps the server's own user.
@pytest.mark.parametrize("worker_user", ["default", ""])
async def test_created_files_land_in_the_given_folder_and_the_result_names_them(
    tmp_path: Path, worker_user: str
) -> None:
    out = tmp_path / "created"
    data = bytes(range(256)) + b"\x00end"
    chosen: dict[str, Any] = {} if worker_user == "default" else {"worker_user": worker_user}
    async with in_memory(PROJECT, tmp_path / "d", "legacy", file_create_store_dir=out, **chosen) as client:
        body = payload(
            await client.call_tool("make", {"name": "../../escape/report.bin", "hex": data.hex(), "count": 2})
        )
    assert body["status"] == "success"
    first, second = body["files"]
    # Existing fields of a returned file stay as they were.
    assert body["output"]["made"] == [
        {"id": f["id"], "name": "report.bin", "mimeType": "application/octet-stream", "size": len(data)}
        for f in (first, second)
    ]
    for ref in (first, second):
        path = Path(ref["path"])
        assert path.parent.parent == out / PROJECT_ID and path.parent.name == ref["id"]
        assert path.name == "report.bin" and path.read_bytes() == data
        assert ref["uri"] == path.as_uri()
        assert ref["size"] == len(data) and ref["mimeType"] == "application/octet-stream"
    assert first["path"] != second["path"]
    # Only the two files: no staging leftovers, nothing outside the folder.
    assert stored_files(out) == sorted(Path(f["path"]) for f in (first, second))
    assert not (tmp_path / "escape").exists()
    # The data dir's blob store holds no copy of them.
    assert stored_files(tmp_path / "d" / "files") == []


async def test_without_the_option_files_land_in_the_data_dirs_created_files(tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("one\ntwo\nthree\n", encoding="utf-8")
    async with in_memory(EXAMPLES / "files", tmp_path / "d", "auto") as client:
        body = payload(await client.call_tool("summarize", {"document": str(doc)}))
    (ref,) = body["files"]
    assert ref["id"] == body["output"]["summaryFile"]["id"]
    path = Path(ref["path"])
    assert path.is_relative_to(tmp_path / "d" / "created-files")
    assert path.read_bytes() == b"notes.md: 3 lines, 14 bytes\n"
    assert ref["name"] == "summary.txt" and ref["mimeType"] == "text/plain"


async def test_a_run_that_fails_still_names_the_file_it_created(tmp_path: Path) -> None:
    out = tmp_path / "created"
    async with in_memory(PROJECT, tmp_path / "d", "legacy", file_create_store_dir=out) as client:
        result = await client.call_tool("make_then_fail", {})
    body = payload(result)
    assert result.is_error and body["error"]["errCode"] == 7
    (ref,) = body["files"]
    assert Path(ref["path"]).read_bytes() == b"written before the failure"


async def test_the_project_quota_still_refuses_and_nothing_is_left_behind(tmp_path: Path) -> None:
    out = tmp_path / "created"
    async with in_memory(
        PROJECT, tmp_path / "d", "legacy", file_create_store_dir=out, project_file_quota_count=1
    ) as client:
        body = payload(await client.call_tool("make", {"name": "a.txt", "hex": "6869", "count": 3}))
    (ref,) = body["files"]
    assert len(body["output"]["made"]) == 1
    assert "quota" in body["output"]["refused"]
    assert stored_files(out) == [Path(ref["path"])]


@pytest.fixture
def unwritable_dir() -> Iterator[Path]:
    """An existing folder this process cannot create files in. Root may write anywhere mode
    bits allow nothing, so as root it is /proc, which refuses new files even to root (and is
    always there: the run service itself reads process start times from it)."""
    if os.geteuid() == 0:
        yield Path("/proc")
        return
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name) / "locked"
        folder.mkdir(mode=0o500)
        try:
            yield folder
        finally:
            folder.chmod(0o700)


def run_mcp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [STEAMHARNESS, "mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error: --file-create-store-dir"), (
        proc.stderr
    )
    return lines[0]


def test_a_relative_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    line = one_error_line(run_mcp(tmp_path, "--file-create-store-dir", "out"))
    assert "must be an absolute path, got 'out'" in line
    assert not (tmp_path / "out").exists()


def test_a_file_in_place_of_the_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder", encoding="utf-8")
    line = one_error_line(run_mcp(tmp_path, "--file-create-store-dir", str(blocker)))
    assert f"{blocker} is not a folder" in line
    assert blocker.read_text(encoding="utf-8") == "not a folder"


def test_a_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path: Path, unwritable_dir: Path) -> None:
    line = one_error_line(run_mcp(tmp_path, "--file-create-store-dir", str(unwritable_dir)))
    assert f"{unwritable_dir} is not writable" in line
    assert not (tmp_path / "d").exists()  # refused before anything was created

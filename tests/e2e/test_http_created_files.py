"""A server (the app in this process: tests/support/inprocess.py) keeps the files runs create
in STEAMHARNESS_FILE_CREATE_STORE_DIR, and its tool results name them without a path the
remote client could not use, and link each to its download, which the client fetches with
its own key; a bad folder stops `serve` in one line (the real command)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx2
import mcp_types as types
import pytest

from tests import processes
from tests.e2e.server import FILES, HELLO, STEAMHARNESS, free_port
from tests.e2e.test_http_mcp import payload, sdk_client
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

pytestmark = pytest.mark.anyio


async def test_a_server_stores_created_files_and_a_client_follows_their_links_with_its_key(
    tmp_path: Path,
) -> None:
    """The Python SDK client over HTTP calls a tool that creates a file; its result names the
    file by id and links it (`resource_link`); the client fetches the link with its own
    Bearer key. Whoever may read the run may fetch it; another account gets 404, no key 401."""
    out = tmp_path / "created"
    with in_process_server(tmp_path / "srv", STEAMHARNESS_FILE_CREATE_STORE_DIR=str(out)) as server:
        assert out.is_dir()  # made at start-up
        key = server.create_key("nia")
        up = httpx2.post(
            f"{server.base_url}/api/workflows/{FILES}/files",
            params={"fileName": "notes.txt", "mimeType": "text/plain"},
            content=b"a\nb\n",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"},
        )
        assert up.status_code == 201, up.text
        file_id = up.json()["data"][0]["id"]
        async with sdk_client(server.mcp_url(FILES), key, "legacy") as client:
            result = await client.call_tool("summarize", {"document": {"id": file_id}})
        body = payload(result)
        (ref,) = body["files"]
        assert ref == {"id": ref["id"], "name": "summary.txt", "mimeType": "text/plain", "size": ref["size"]}
        assert ref["id"] == body["output"]["summaryFile"]["id"]
        stored = out / FILES / ref["id"] / "summary.txt"
        assert stored.read_bytes() == b"notes.txt: 2 lines, 4 bytes\n"
        assert ref["size"] == stored.stat().st_size
        assert sorted(p for p in out.rglob("*") if p.is_file()) == [stored]

        (link,) = [c for c in result.content if isinstance(c, types.ResourceLink)]
        assert (link.name, link.mime_type, link.size) == ("summary.txt", "text/plain", ref["size"])
        assert str(link.uri) == f"{server.base_url}/api/runs/{body['runId']}/files/{ref['id']}"
        server.add_user("ola")  # another account, granted another project only
        server.grant("ola", [HELLO])
        others = {"ola": server.create_key("ola"), "pia": server.create_key("pia")}  # pia: every project
        async with httpx2.AsyncClient(timeout=WAIT) as http:

            async def fetch(raw: str | None) -> httpx2.Response:
                headers = {"Authorization": f"Bearer {raw}"} if raw is not None else {}
                return await http.get(str(link.uri), headers=headers)

            got = await fetch(key)
            assert got.status_code == 200, got.text
            assert got.content == stored.read_bytes()
            assert got.headers["content-disposition"].startswith('attachment; filename="summary.txt"')
            assert got.headers["x-content-type-options"] == "nosniff"
            assert (await fetch(server.admin_key)).content == got.content
            assert (await fetch(others["pia"])).content == got.content
            assert (await fetch(others["ola"])).status_code == 404
            assert (await fetch(None)).status_code == 401


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("relative/out", "STEAMHARNESS_FILE_CREATE_STORE_DIR must be an absolute path, got 'relative/out'"),
        ("{taken}", "is not a folder"),
    ],
)
def test_serve_with_an_unusable_created_files_folder_exits_with_one_clear_line(
    tmp_path: Path, value: str, message: str
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    env["STEAMHARNESS_FILE_CREATE_STORE_DIR"] = value.format(taken=taken)
    proc = processes.run(
        [STEAMHARNESS, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert taken.read_text(encoding="utf-8") == "a file"

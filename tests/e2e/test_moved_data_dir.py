"""A data dir moved to another path keeps serving its published versions: stored paths are
relative to it, and rows an older version wrote with absolute paths are found again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.e2e.server import HELLO, LEDGER, make_server
from tests.e2e.test_http_mcp import payload, sdk_client

pytestmark = pytest.mark.anyio


async def test_publish_move_the_data_dir_start_again_and_call_the_tools(tmp_path: Path) -> None:
    server = make_server(tmp_path / "before")
    key = server.create_key("mo")
    db = sqlite3.connect(server.data_dir / "steamharness.sqlite3")
    with db:
        (stored,) = db.execute(
            "SELECT snapshot_dir FROM project_versions WHERE project_id = ?", (LEDGER,)
        ).fetchone()
        assert stored.startswith(f"versions/{LEDGER}/")
        # HELLO's row as an older version wrote it: the absolute path of the old data dir.
        db.execute(
            "UPDATE project_versions SET snapshot_dir = ? || '/' || snapshot_dir WHERE project_id = ?",
            (str(server.data_dir), HELLO),
        )
    db.close()
    moved = tmp_path / "elsewhere" / ".steamharness"
    moved.parent.mkdir()
    server.data_dir.rename(moved)
    server.data_dir = moved
    with server.running():
        async with sdk_client(server.mcp_url(HELLO), key, "legacy") as client:
            body = payload(await client.call_tool("greet", {"name": "Ada"}))
        assert body["output"] == {"greeting": "Hello, Ada!"}
        async with sdk_client(server.mcp_url(LEDGER), key, "legacy") as client:
            assert (await client.list_tools()).tools
    db = sqlite3.connect(moved / "steamharness.sqlite3")
    rows = dict(db.execute("SELECT project_id, snapshot_dir FROM project_versions").fetchall())
    db.close()
    assert rows[HELLO].startswith(f"versions/{HELLO}/")

"""Two `serve` processes, each with its own data dir, sharing one database, secret key and
shared dir, are one server: a browser login made on one is valid on the other, a file
uploaded through one is used by a call on the other, a replica killed mid-run has its run
marked interrupted by the survivor once its lease lapses (the survivor's own run goes on),
and a replica restarting leaves the other's MCP sessions open."""

from __future__ import annotations

import contextlib
import re
import secrets
import signal
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.server import FILES, HELLO, TORTURE, LiveServer, free_port, make_server
from tests.e2e.test_http_mcp import headers, open_session, payload, sdk_client, sse_json
from tests.helpers import WAIT, wait_until_gone
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
LEASE_TTL = "3"
USER = ("rhea", "rhea-password-1")
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Pair:
    a: LiveServer
    b: LiveServer
    db: Path
    shared: Path
    key: str

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db, timeout=TIMEOUT)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def wait_for(self, what: str, found: Callable[[], Any]) -> Any:
        """Poll the shared database until `found` returns something (bounded)."""
        try:
            return eventually(lambda: found() or None, what, timeout=TIMEOUT)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nA:\n{self.a.log()}\nB:\n{self.b.log()}") from None


def replica_of(server: LiveServer) -> str:
    health = httpx2.get(f"{server.base_url}/healthz", timeout=TIMEOUT)
    assert health.status_code == 200
    return health.json()["replica"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("replicas")
    db = root / "shared.sqlite3"
    shared = root / "shared"
    env = {
        "STEAMHARNESS_DATABASE_URL": f"sqlite:///{db}",
        "STEAMHARNESS_SECRET_KEY": secrets.token_urlsafe(32),
        "STEAMHARNESS_SHARED_DIR": str(shared),
        "STEAMHARNESS_REPLICA_LEASE_TTL_SECONDS": LEASE_TTL,
    }
    a = make_server(root / "a", **env)  # registers and publishes into the shared database and dir
    b = LiveServer(
        data_dir=root / "b" / "data", projects=a.projects, port=free_port(), admin_key=a.admin_key, env=a.env
    )
    b.data_dir.parent.mkdir()
    key = a.create_key("nia")
    a.add_user(USER[0], password=USER[1])
    with a.running(), b.running():
        yield Pair(a, b, db, shared, key)


def test_the_replicas_are_two_and_publish_into_the_shared_dir(pair: Pair) -> None:
    assert replica_of(pair.a) != replica_of(pair.b)
    assert (pair.shared / "versions" / HELLO).is_dir()
    assert not (pair.a.data_dir / "versions").exists() and not (pair.b.data_dir / "versions").exists()
    assert not (pair.a.data_dir / "keys" / "ui-session.key").exists()  # derived from the secret key


def test_a_login_made_on_one_replica_is_valid_on_the_other(pair: Pair) -> None:
    with httpx2.Client(base_url=pair.a.base_url, timeout=TIMEOUT) as a:
        form = a.get("/login")
        token = CSRF_RE.search(form.text)
        assert token, form.text
        r = a.post(
            "/login",
            data={"username": USER[0], "password": USER[1], "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        cookies = dict(a.cookies.items())
    assert cookies
    with httpx2.Client(base_url=pair.b.base_url, timeout=TIMEOUT, cookies=cookies) as b:
        page = b.get("/projects", follow_redirects=False)
        assert page.status_code == 200, page.text
        assert USER[0] in page.text
    with httpx2.Client(base_url=pair.b.base_url, timeout=TIMEOUT) as stranger:
        assert stranger.get("/projects", follow_redirects=False).status_code == 303


async def test_a_file_uploaded_through_one_replica_is_used_by_a_call_on_the_other(pair: Pair) -> None:
    up = httpx2.post(
        f"{pair.a.base_url}/api/workflows/{FILES}/files",
        params={"fileName": "notes.txt", "mimeType": "text/plain"},
        content=b"a\nb\nc\n",
        headers={"Authorization": f"Bearer {pair.key}", "Content-Type": "application/octet-stream"},
        timeout=TIMEOUT,
    )
    assert up.status_code == 201, up.text
    file_id = up.json()["data"][0]["id"]
    ((storage,),) = pair.query("SELECT storage FROM managed_files WHERE id = ?", file_id)
    assert not storage.startswith("/") and (pair.shared / storage).is_file()
    async with sdk_client(pair.b.mcp_url(FILES), pair.key, "legacy") as client:
        body = payload(await client.call_tool("summarize", {"document": {"id": file_id}}))
    assert body["status"] == "success", body
    (made,) = body["files"]
    ((made_storage,),) = pair.query("SELECT storage FROM managed_files WHERE id = ?", made["id"])
    assert (pair.shared / made_storage).read_bytes() == b"notes.txt: 3 lines, 6 bytes\n"


def running_sleep(pair: Pair, replica: str) -> tuple[str, int] | None:
    """(run id, worker pid) of a `sleep` run `replica` drives once its worker reported."""
    rows = pair.query(
        "SELECT r.id, e.data FROM runs r JOIN run_events e ON e.run_id = r.id"
        " WHERE r.replica_id = ? AND r.entrypoint_id = 'sleep' AND r.status = 'running'"
        " AND e.kind = 'progress'",
        replica,
    )
    if not rows:
        return None
    run_id, data = rows[0]
    match = re.search(r"worker=(\d+)", str(data))
    assert match, data
    return run_id, int(match.group(1))


def closed_sessions(pair: Pair, ids: list[str]) -> dict[str, str | None] | None:
    """{session id: close reason} once every one of `ids` is closed, else None."""
    marks = ", ".join("?" * len(ids))
    rows = pair.query(
        f"SELECT id, close_reason FROM mcp_sessions WHERE id IN ({marks}) AND closed_at IS NOT NULL", *ids
    )
    return dict(rows) if len(rows) == len(ids) else None


async def call_until_cut_off(server: LiveServer, key: str) -> None:
    """A long call; the replica dying under it ends it with an error, which is expected here."""
    with contextlib.suppress(Exception):
        async with sdk_client(server.mcp_url(TORTURE), key, "legacy") as client:
            await client.call_tool("sleep", {})


async def test_a_killed_replicas_run_is_interrupted_by_the_survivor_and_a_restart_keeps_its_sessions(
    pair: Pair,
) -> None:
    a_id, b_id = replica_of(pair.a), replica_of(pair.b)
    b_session = open_session(pair.b, pair.key)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call_until_cut_off, pair.a, pair.key)
        tg.start_soon(call_until_cut_off, pair.b, pair.key)
        a_run, a_worker = await anyio.to_thread.run_sync(
            pair.wait_for, "A's run", lambda: running_sleep(pair, a_id)
        )
        b_run, _ = await anyio.to_thread.run_sync(pair.wait_for, "B's run", lambda: running_sleep(pair, b_id))
        a_sessions = [
            sid
            for (sid,) in pair.query(
                "SELECT id FROM mcp_sessions WHERE replica_id = ? AND closed_at IS NULL", a_id
            )
        ]
        assert a_sessions

        assert pair.a.stop(signal.SIGKILL) == -signal.SIGKILL
        await wait_until_gone([a_worker], timeout=TIMEOUT)  # its fork server ends the workers
        await anyio.to_thread.run_sync(
            pair.wait_for,
            "A's run interrupted",
            lambda: pair.query("SELECT 1 FROM runs WHERE id = ? AND status = 'failed'", a_run),
        )
        ((error,),) = pair.query("SELECT error FROM runs WHERE id = ?", a_run)
        assert '"interrupted"' in error and "replica" in error
        ((actor, details),) = pair.query(
            "SELECT actor, details FROM audit_events WHERE event = 'run.interrupted' AND run_id = ?", a_run
        )
        assert actor == f"replica:{b_id}" and a_id in details and "lease expired" in details
        # The survivor's own run goes on; the dead replica's sessions are closed (the sweep
        # closes them before it marks the runs; waited for all the same: a separate write).
        assert pair.query("SELECT status FROM runs WHERE id = ?", b_run) == [("running",)]
        closed = await anyio.to_thread.run_sync(
            pair.wait_for, "A's sessions closed", lambda: closed_sessions(pair, a_sessions)
        )
        assert set(closed.values()) == {"replica lost"}, closed
        tg.cancel_scope.cancel()

    pair.a.start()  # the same data dir: the same replica again
    assert replica_of(pair.a) == a_id
    assert pair.query("SELECT closed_at FROM mcp_sessions WHERE id = ?", b_session) == [(None,)]
    body = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    r = httpx2.post(pair.b.mcp_url(HELLO), headers=headers(pair.key, b_session), json=body, timeout=TIMEOUT)
    assert r.status_code == 200 and sse_json(r)["result"] == {}
    assert "Traceback" not in pair.b.log()

"""Workers of different runs (and accounts) are different users: a handler of one account
cannot signal another account's worker, or the program it started, nor read their
/proc entries. A real `serve` as root, called over MCP by two accounts."""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import LiveServer
from tests.helpers import needs_root
from tests.security.isolation_project import VICTIM_ID, WALKER_ID, account_key, call_tool, isolated_server
from webui.errors import ConfigError
from webui.runs.isolation import WorkerUids, is_mapped
from webui.services import open_services
from webui.settings import Settings

pytestmark = [
    pytest.mark.anyio,
    needs_root,
]


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    base = Path(tempfile.mkdtemp(prefix="sh-worker-users-"))
    try:
        server = isolated_server(base)
        with server.running():
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))


async def test_a_handler_cannot_signal_or_inspect_another_accounts_worker(live: LiveServer) -> None:
    bob = account_key(live, "bob", VICTIM_ID)
    held = await call_tool(live, bob, VICTIM_ID, "hold", {})
    assert held["error"]["code"] == "interaction_required", held  # bob's worker waits, alive
    settings = Settings()
    low, high = settings.worker_uid_base, settings.worker_uid_base + settings.worker_uid_count
    alice = account_key(live, "alice", WALKER_ID)
    out = (await call_tool(live, alice, WALKER_ID, "attack", {"uidLow": low, "uidHigh": high}))["output"]
    assert low <= out["uid"] < high
    targets = out["targets"]
    # bob's worker and the program it started: both found, of another uid than alice's run
    assert len(targets) >= 2, targets
    for target in targets:
        assert target["uid"] != out["uid"]
        assert target["kill"] == errno.EPERM, target
        for what in ("environ", "cwd", "cwdList", "fd", "mem"):
            assert target[what] == errno.EACCES, (what, target)
    for target in targets:
        os.kill(target["pid"], 0)  # still alive: the signal never arrived
        assert uid_of(target["pid"]) == target["uid"]


async def test_two_runs_at_once_run_as_two_different_uids(live: LiveServer) -> None:
    bob = account_key(live, "bob", VICTIM_ID)
    await call_tool(live, bob, VICTIM_ID, "hold", {})
    settings = Settings()
    low, high = settings.worker_uid_base, settings.worker_uid_base + settings.worker_uid_count
    alice = account_key(live, "alice", WALKER_ID)
    out = (await call_tool(live, alice, WALKER_ID, "attack", {"uidLow": low, "uidHigh": high}))["output"]
    # the waiting runs of bob (this test's and the last one's): each a uid of its own
    assert len({t["uid"] for t in out["targets"]}) >= 2, out


# ------------------------------------------------------------------- the range itself


async def test_a_uid_range_that_holds_an_account_stops_start_up(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    settings = Settings(data_dir=tmp_path / "data", worker_uid_base=nobody.pw_uid - 1, worker_uid_count=4)
    with pytest.raises(ConfigError, match="holds user nobody"):
        async with open_services(settings):
            pass
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_a_range_this_user_namespace_does_not_map_is_not_used(tmp_path: Path) -> None:
    uid_map = tmp_path / "uid_map"
    uid_map.write_text("         0     100000      65536\n", encoding="utf-8")
    assert is_mapped(str(uid_map), 1000, 2000)
    assert not is_mapped(str(uid_map), 60000, 70000)  # runs over the end of the mapping
    assert not is_mapped(str(uid_map), 1_500_000_000, 1_500_001_024)


def test_a_uid_given_back_is_the_last_one_taken_again() -> None:
    uids = WorkerUids(5000, 3)
    first, second = uids.acquire(), uids.acquire()
    assert (first.uid, first.gid, first.name) == (5000, 5000, "run0")
    uids.release(first.uid)
    assert [uids.acquire().uid, uids.acquire().uid] == [5002, 5000]
    with pytest.raises(RuntimeError, match="every one of the 3 worker uids is in use"):
        uids.acquire()
    uids.release(second.uid)
    uids.release(second.uid)  # twice: still one free uid
    assert uids.in_use() == 2

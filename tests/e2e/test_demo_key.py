"""`serve --demo` keeps one demo API key across starts: two real starts on the same data dir
print the same key and leave exactly one live demo key; a key file that no longer names a
live key (deleted, or its key revoked) gets a new key and the old one stops working."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from tests import processes
from tests.e2e.server import STEAMHARNESS, free_port
from tests.helpers import WAIT
from webui.admin import DEMO_KEY_FILE
from webui.store import accounts as account_store
from webui.store.db import make_engine, sqlite_url

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    return {**base, "STEAMHARNESS_SERVER_ADMIN_KEY": secrets.token_urlsafe(32)}


@contextlib.contextmanager
def demo_server(data_dir: Path) -> Iterator[tuple[int, str]]:
    """`serve --demo` on a free loopback port until it answers; yields (port, the printed
    key); stopped by its PID when the block ends."""
    port = free_port()
    log = data_dir.parent / f"demo-{port}.log"
    with log.open("wb") as err:
        proc = processes.Popen(
            [STEAMHARNESS, "serve", "--demo", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env(),
        )
    try:
        assert proc.stdout is not None
        key = None
        while key is None:
            line = proc.stdout.readline().decode()
            assert line, f"serve --demo printed no key:\n{log.read_text()}"
            if line.startswith("demo API key:"):
                key = line.split(":", 1)[1].strip()
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.05)  # the port is not listening yet; bounded by the deadline
        yield port, key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def whoami(port: int, key: str) -> int:
    r = httpx2.get(
        f"http://127.0.0.1:{port}/api/whoami", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    return r.status_code


def live_demo_keys(data_dir: Path) -> list[str]:
    engine = make_engine(sqlite_url(data_dir / "steamharness.sqlite3"))
    try:
        account = account_store.get_account(engine, name="demo")
        assert account is not None and account.id is not None
        keys = account_store.list_keys(engine, account_id=account.id)
        return [k.id for k, _ in keys if k.revoked_at is None]
    finally:
        engine.dispose()


def test_a_second_demo_start_reuses_the_key_and_leaves_one_live(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with demo_server(data) as (port, first):
        assert whoami(port, first) == 200
    key_file = data / DEMO_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip() == first
    with demo_server(data) as (port, second):
        assert second == first
        assert whoami(port, second) == 200
    assert live_demo_keys(data) == [f"key_{first.removeprefix('shk_').split('_')[0]}"]


def test_a_lost_or_revoked_demo_key_is_replaced_and_the_old_one_stops_working(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with demo_server(data) as (_, first):
        pass
    (data / DEMO_KEY_FILE).unlink()  # lost: the old key is revoked, a new one issued
    with demo_server(data) as (port, second):
        assert second != first
        assert whoami(port, first) == 401
        assert whoami(port, second) == 200
    assert len(live_demo_keys(data)) == 1

    [key_id] = live_demo_keys(data)
    revoked = processes.run(
        [STEAMHARNESS, "keys", "revoke", key_id, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env(),
    )
    assert revoked.returncode == 0, revoked.stderr
    with demo_server(data) as (port, third):
        assert third not in (first, second)
        assert whoami(port, second) == 401
        assert whoami(port, third) == 200
    assert len(live_demo_keys(data)) == 1

"""`serve` claims its port and data dir before it prints or writes anything (real processes
on loopback, each stopped by its PID): on a port another program holds it says so in one line
and exits at once, its data dir untouched; a second `serve` on a data dir already served says
where the first one runs; a start that succeeds says where to open the web UI and which login
to use."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from tests import prepared, processes
from tests.conftest import server_env
from tests.e2e.server import STEAMHARNESS, free_port, make_server
from tests.helpers import WAIT


def serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [STEAMHARNESS, "serve", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,  # a hang guard: it answers without starting anything
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_serve_on_a_port_another_program_holds_says_so_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()  # never accepts: what answers there is no steamharness
        port = held.getsockname()[1]
        proc = serve("--demo", "--port", str(port), "--data-dir", str(data), env=server_env())
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"port {port} is in use by another program; choose another with --port"
    ]
    assert proc.stdout == ""  # no demo password, no key, no URLs
    assert not data.exists()  # no database, no demo key, no replica id


def test_a_start_says_where_to_open_the_web_ui_and_a_second_serve_says_where_the_first_runs(
    tmp_path: Path,
) -> None:
    first = make_server(tmp_path)
    with first.running():
        assert first.proc is not None
        lines = first.log().splitlines()
        assert f"steamharness is running: open {first.base_url} in a browser" in lines
        assert (
            "no account can log in yet: make one with steamharness users create NAME --admin --password-stdin"
            in lines
        )
        running = (
            f"steamharness is already running at {first.base_url}"
            f" (pid {first.proc.pid}, data dir {first.data_dir})"
        )
        before = sorted(p.name for p in first.data_dir.iterdir())
        for port in (free_port(), first.port):  # another port, or the same one
            proc = serve("--demo", "--port", str(port), "--data-dir", str(first.data_dir), env=first.env)
            assert proc.returncode == 1, proc.stderr
            assert proc.stderr.splitlines() == [running]
            assert proc.stdout == ""  # no demo password, no key, no URLs
        assert sorted(p.name for p in first.data_dir.iterdir()) == before  # no demo key written
        # Its port, from another data dir: a steamharness answers there.
        other = serve("--port", str(first.port), "--data-dir", str(tmp_path / "other"), env=first.env)
        assert other.returncode == 1, other.stderr
        assert other.stderr.splitlines() == [
            f"steamharness is already running at {first.base_url} (with another data dir);"
            " choose another port with --port"
        ]
        assert not (tmp_path / "other").exists()
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL  # no chance to clean up
    # Its lock went with its process: the data dir serves again, and names an account to use.
    with first.store() as (engine, _):
        prepared.add_user(engine, *prepared.USER, admin=False)
    with first.running():
        assert f"log in with your account: {prepared.USER[0]}" in first.log().splitlines()

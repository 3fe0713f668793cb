"""A password in `steamharness serve --database-url` is not readable in the server's
/proc/<pid>/cmdline, which every process on the machine (workflow code under its run's
uid included) may read, whatever the server's dumpable flag."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SECRET = "pg-s3cret-not-for-runs"
URL = f"postgresql://steam:{SECRET}@db.example.test:5432/steam"


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_hide_in_cmdline_overwrites_the_secret_where_others_read_it() -> None:
    code = (
        "import sys, time\n"
        "from webui.cli.argv import hide_in_cmdline\n"
        f"print(hide_in_cmdline({SECRET!r}), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--database-url", URL], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "True"
        line = cmdline(proc.pid)
        assert SECRET.encode() not in line
        assert b"postgresql://steam:" in line and b"@db.example.test:5432/steam" in line
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_serve_hides_the_database_password_before_it_starts(tmp_path: Path) -> None:
    # Nothing listens at that address: serve fails to reach the database, after hiding it.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webui.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "1",
            "--database-url",
            URL,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                seen = cmdline(proc.pid)
            except OSError:
                break
            if b"serve" in seen and SECRET.encode() not in seen:
                break
            time.sleep(0.05)
        assert SECRET.encode() not in seen
    finally:
        proc.kill()
        proc.wait()

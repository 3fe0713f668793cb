"""A second engine on the same SQLite file, made in a process whose first engine has the
file open, leaves the first engine's locks held (webui.store.db `_private_sqlite_file` never
opens and closes a file that exists: closing any descriptor of a file drops every POSIX lock
the process holds on it). Without its shared lock, another process's last close believes
itself the file's only user and removes the write-ahead log under the first engine (`disk
I/O error`): what an in-process server and a test's operator writes do side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from tests.helpers import WAIT
from webui.store.db import make_engine, sqlite_url

# Another process opens the file, writes a row and closes it (the last user's close
# checkpoints and removes the -wal and -shm files).
OTHER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=5, isolation_level=None)
conn.execute("INSERT INTO t VALUES (2)")
conn.close()
"""


def test_a_second_engine_in_the_process_keeps_the_first_engines_locks(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    first = make_engine(sqlite_url(path), check_schema=False)
    try:
        with first.connect() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
            conn.commit()
            make_engine(sqlite_url(path), check_schema=False).dispose()
            other = subprocess.run(
                [sys.executable, "-c", OTHER, str(path)], capture_output=True, timeout=WAIT
            )
            assert other.returncode == 0, other.stderr
            assert Path(f"{path}-wal").exists(), "the other process's close removed the log in use"
            conn.execute(text("INSERT INTO t VALUES (3)"))
            conn.commit()
            assert sorted(conn.execute(text("SELECT x FROM t")).scalars()) == [1, 2, 3]
    finally:
        first.dispose()

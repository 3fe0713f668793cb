"""Not root, the handler check imports a project's files as the CLI's own user: the CLI
process is non-dumpable first, so that code cannot read its environment or memory."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import WAIT

PROBE = """
import ctypes, os
from webui.projects.handler_check import private_self
libc = ctypes.CDLL(None, use_errno=True)
before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
private_self()
after = libc.prctl(3, 0, 0, 0, 0)
print(before, after)
"""


def test_the_process_that_checks_handlers_as_its_own_user_is_not_dumpable() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=WAIT, check=True
    )
    assert done.stdout.split() == ["1", "0"], done.stderr

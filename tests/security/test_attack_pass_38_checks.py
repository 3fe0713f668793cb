"""Attack pass on issue 38's handler check (webui.workflows.handlers, webui.bounded_child):
what a hostile handler module can do from its import, in the bounded child, to the process
that asked for the check (the server's publish, `projects add`, `structure`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import WAIT
from tests.workflows.test_handler_check import PROJECT_ID
from webui.workflows.handlers import CheckBounds, HandlerRef, check_handlers

# The import finds the check's own copy of the answer pipe (check_child's `stdout`), writes
# far more than the parent reads, then waits out every deadline of the child's own: only the
# parent's reading bound can stop it before its wall-clock bound.
FLOOD = """
import os, signal, sys
signal.signal(signal.SIGALRM, signal.SIG_IGN)
frame = sys._getframe()
while "stdout" not in frame.f_locals:
    frame = frame.f_back
chunk = b"x" * (1 << 20)
for _ in range(32):
    os.write(frame.f_locals["stdout"], chunk)
while True:
    signal.pause()
"""


def _project(root: Path, source: str) -> list[HandlerRef]:
    root.mkdir(parents=True)
    package = {
        "id": PROJECT_ID,
        "name": "hostile",
        "projectType": "workflow",
        "entrypoints": [{"id": "run", "handler": "main.py:run"}],
    }
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "main.py").write_text(source + "\ndef run(ctx):\n    return 1\n", encoding="utf-8")
    return [HandlerRef("run", "main.py:run", f"{root}/package.json:1: entrypoints[0].handler")]


@pytest.mark.xfail(strict=True, reason="run_child_blocking reads the child's whole stdout until its deadline")
def test_a_handler_import_flooding_the_answer_pipe_is_stopped_at_the_read_bound(tmp_path: Path) -> None:
    """The blocking check (publish, `projects add`, `structure`) read the child's whole
    stdout (`communicate`) for as long as the child lived: an import writing GBs to it filled
    the server's memory. The parent now reads at most the check's output bound, then kills."""
    refs = _project(tmp_path / "p", FLOOD)
    started = time.monotonic()
    found = check_handlers(tmp_path / "p", refs, CheckBounds(seconds=8))
    assert time.monotonic() - started < WAIT  # a hang guard
    assert len(found) == 1 and "importing them wrote more than the check reads" in found[0], found

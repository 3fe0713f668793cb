"""The data dir's `serve.lock` read as hostile: whatever a held lock file says (escape
sequences, a huge file, another type, a URL that is no URL), `serve`'s refusal is one
bounded, terminal-safe line that names only what the file could hold as this module writes it."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import pytest

from tests.helpers import WAIT
from webui.cli.serve_claim import LOCK_FILE, MAX_LOCK_BYTES, Claim, NotFree, claim, holder, lock
from webui.terminal_text import CONTROLS

STARTING = "steamharness is already running on data dir {data} (it is starting)"


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[1, 2, 3]",
        json.dumps({"pid": 7, "url": "http://x\x1b]0;owned\x07\x1b[2J", "host": "h"}).encode(),
        json.dumps({"pid": 7, "url": "javascript:alert(1)", "host": "h"}).encode(),
        json.dumps({"pid": True, "url": "http://127.0.0.1:1", "host": "h"}).encode(),
        json.dumps({"pid": 7, "url": "http://" + "a" * 10_000, "host": "h"}).encode(),
        json.dumps({"pid": 7, "url": "http://127.0.0.1:1", "x": "a" * MAX_LOCK_BYTES}).encode(),
        b"{" * 100_000,
    ],
)
def test_a_held_lock_file_saying_anything_else_reads_as_a_serve_starting(
    tmp_path: Path, content: bytes
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / LOCK_FILE).write_bytes(content)
    fd = os.open(data / LOCK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = holder(data)
    finally:
        os.close(fd)
    assert held is not None
    assert held.message() == STARTING.format(data=data)


def test_escape_sequences_in_the_hosts_name_are_never_shown(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    record = {"pid": 7, "url": "http://127.0.0.1:1", "host": "\x1b]52;c;cm0gLXJmIH4=\x07\u202eevil"}
    (data / LOCK_FILE).write_text(json.dumps(record))
    fd = os.open(data / LOCK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = holder(data)
    finally:
        os.close(fd)
    assert held is not None
    message = held.message()
    assert message == f"steamharness is already running at http://127.0.0.1:1 (pid 7, data dir {data})"
    assert not any(ord(c) in CONTROLS for c in message)


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("someone else's file")
    data = tmp_path / "data"
    data.mkdir()
    (data / LOCK_FILE).symlink_to(elsewhere)
    assert holder(data) is None
    with pytest.raises(NotFree, match=r"cannot lock the data dir: .*serve\.lock: "):
        lock(data, "http://127.0.0.1:1")
    assert elsewhere.read_text() == "someone else's file"


def test_a_lock_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Whoever can write the data dir (a data dir under /tmp made by another user first)
    puts a FIFO where `serve.lock` goes: `serve` opened it to read who holds the data dir and
    waited for a writer for ever, before printing anything. It refuses it at once now."""
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / LOCK_FILE)
    outcome: list[object] = []

    def serve_claims() -> None:
        try:
            outcome.append(claim(data, "127.0.0.1", 0))
        except NotFree as exc:
            outcome.append(exc.message)

    thread = threading.Thread(target=serve_claims, daemon=True)
    thread.start()
    thread.join(10)  # a hang guard: claiming takes no waiting
    if thread.is_alive():  # let the old code's open go on: a writer, then end of file
        os.close(os.open(data / LOCK_FILE, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(WAIT)
    for taken in outcome:
        if isinstance(taken, Claim):
            for sock in taken.sockets:
                sock.close()
            os.close(taken.lock_fd)
    assert outcome == [f"cannot lock the data dir: {data / LOCK_FILE}: not a regular file"]

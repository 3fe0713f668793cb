"""What `serve` claims before anything else (`webui.cli.serve_claim`), in this process: the
data dir's lock names its holder and goes with the holder's descriptor, a lock file nobody
holds is no holder, a busy port is told apart from a free one, and the sockets it hands to
uvicorn already listen."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from webui.cli.serve_claim import LOCK_FILE, NotFree, bind, claim, holder, lock, web_url


def test_a_locked_data_dir_names_its_holder_until_the_lock_is_let_go(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fd = lock(data, "http://127.0.0.1:8000")
    try:
        held = holder(data)
        assert held is not None
        assert held.message() == (
            f"steamharness is already running at http://127.0.0.1:8000 (pid {os.getpid()}, data dir {data})"
        )
        with pytest.raises(NotFree) as again:  # another open of the file: another holder
            lock(data, "http://127.0.0.1:9000")
        assert again.value.message == held.message()
    finally:
        os.close(fd)  # what the kernel does when the holder's process ends, however it ends
    assert holder(data) is None
    assert (data / LOCK_FILE).is_file()  # left behind, and no holder: the next serve takes it
    os.close(lock(data, "http://127.0.0.1:9000"))


def test_no_lock_file_is_no_holder_and_looking_writes_nothing(tmp_path: Path) -> None:
    assert holder(tmp_path / "absent") is None
    assert not (tmp_path / "absent").exists()


def test_a_claim_listens_at_once_and_a_second_one_is_refused_before_it_locks(tmp_path: Path) -> None:
    claimed = claim(tmp_path / "data", "127.0.0.1", 0)
    try:
        assert claimed.url == f"http://127.0.0.1:{claimed.port}"
        # Listening already: a client's connection is queued until the server accepts it.
        socket.create_connection(("127.0.0.1", claimed.port), timeout=5).close()
        with pytest.raises(NotFree, match="steamharness is already running at"):
            claim(tmp_path / "data", "127.0.0.1", 0)
        with pytest.raises(NotFree, match=f"port {claimed.port} is in use by another program"):
            claim(tmp_path / "other", "127.0.0.1", claimed.port)
        assert not (tmp_path / "other").exists()
    finally:
        for sock in claimed.sockets:
            sock.close()
        os.close(claimed.lock_fd)


def test_a_port_that_cannot_be_bound_for_another_reason_says_why() -> None:
    with pytest.raises(NotFree, match=r"cannot listen on 192\.0\.2\.1:\d+: "):
        bind("192.0.2.1", 0)  # TEST-NET-1: an address of no interface here


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("::1", "http://[::1]:8000"),
        ("localhost", "http://localhost:8000"),
    ],
)
def test_the_url_a_browser_on_this_machine_opens(host: str, url: str) -> None:
    assert web_url(host, 8000) == url

"""What `steamharness serve` claims before it prints or writes anything else: its listening
sockets and its data dir.

- The sockets are bound and listening here, then handed to uvicorn as they are, so no other
  process can take the port between this check and the server's start. A connection made
  meanwhile waits in the backlog until the server accepts it.
- The data dir is held by an exclusive `flock` on `DATA_DIR/serve.lock`, which names the
  holder (its PID, host and URL). The kernel drops the lock when the holder's process ends,
  however it ends, so a crashed serve never blocks the next one. Every serve process has a
  data dir of its own, replicas on PostgreSQL included (`webui/replicas.py`): a second serve
  on a held data dir is always a mistake. The CLI's other commands and stdio servers share
  the data dir freely and never take the lock.

A port that cannot be bound is told apart: a serve of this data dir holds it (named from its
lock file), another steamharness answers `/healthz` on it, or another program has it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = "serve.lock"
# The lock file is the holder's own few bytes; anything longer is not one of ours.
MAX_LOCK_BYTES = 4096
MAX_URL_CHARS = 300
# Asking a port's holder whether it is a steamharness server, in all: a bound, not a speed check.
PROBE_TIMEOUT_SECONDS = 1.0
MAX_PROBE_BYTES = 4096
BACKLOG = 2048  # uvicorn's default
LOCK_TRIES, LOCK_RETRY_SECONDS = 5, 0.02
WILDCARD = {"", "0.0.0.0", "::"}
# The lock file is opened without following a link and without waiting (a FIFO put there
# would make the open wait for a writer), then used only when it is a regular file.
_OPEN_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
# What a lock file may name, as this module writes it (printable ASCII, bounded): anything
# else is not shown.
_URL_RE = re.compile(rf"http://[\x21-\x7e]{{1,{MAX_URL_CHARS}}}")
_HOST_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


class NotFree(Exception):
    """The port or the data dir is held: `message` is the one line to print."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Holder:
    """The serve process holding a data dir, as its lock file names it (None: not written yet)."""

    data_dir: Path
    pid: int | None
    host: str | None
    url: str | None

    def message(self) -> str:
        if self.url is None or self.pid is None:
            return f"steamharness is already running on data dir {self.data_dir} (it is starting)"
        on = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""
        return f"steamharness is already running at {self.url} (pid {self.pid}{on}, data dir {self.data_dir})"


@dataclass
class Claim:
    """The listening sockets and the data dir's lock, held until the process ends."""

    sockets: list[socket.socket]
    url: str
    lock_fd: int

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])


def web_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a server listening on `host`:`port` (a wildcard
    address by loopback)."""
    if host in WILDCARD:
        host = "::1" if host == "::" else "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def claim(data_dir: Path, host: str, port: int) -> Claim:
    """Bind `host`:`port` and lock `data_dir`, or `NotFree` with the line that says why.

    Nothing is written unless both are free except the data dir itself and its lock file
    (the port is checked first, and the data dir's holder before it without writing)."""
    held = holder(data_dir)
    if held is not None:
        raise NotFree(held.message())
    sockets = bind(host, port)
    try:
        url = web_url(host, int(sockets[0].getsockname()[1]))
        return Claim(sockets=sockets, url=url, lock_fd=lock(data_dir, url))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise


def holder(data_dir: Path) -> Holder | None:
    """The serve process holding `data_dir`, or None; only reads."""
    try:
        fd = os.open(data_dir / LOCK_FILE, _OPEN_FLAGS | os.O_RDONLY)
    except OSError:
        return None  # no lock file (or none we can read): no serve holds it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # not one of ours (a FIFO, a device): `lock` refuses it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd, data_dir)
        return None
    finally:
        os.close(fd)  # drops the shared lock taken to look, if it was taken


def lock(data_dir: Path, url: str) -> int:
    """Lock `data_dir` for this process and write its PID, host and URL in the lock file:
    the descriptor, kept open (never inherited by an exec'd child) for the process's life."""
    from webui.store.db import private_dir

    path = data_dir / LOCK_FILE
    try:
        private_dir(data_dir)
        fd = os.open(path, _OPEN_FLAGS | os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # a link there is never followed
        raise NotFree(f"cannot lock the data dir: {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotFree(f"cannot lock the data dir: {path}: not a regular file")
    try:
        _lock_now(fd)
    except BlockingIOError:
        held = _read_holder(fd, data_dir)
        os.close(fd)
        raise NotFree(held.message()) from None
    except BaseException:
        os.close(fd)
        raise
    record = {"pid": os.getpid(), "host": socket.gethostname(), "url": url}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return fd


def _lock_now(fd: int) -> None:
    """The exclusive lock, or BlockingIOError: tried a few times, since another `serve` looking
    (`holder`) holds a shared lock on the file for a moment."""
    for _ in range(LOCK_TRIES - 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_RETRY_SECONDS)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _read_holder(fd: int, data_dir: Path) -> Holder:
    try:
        raw = os.pread(fd, MAX_LOCK_BYTES + 1, 0)
        record = json.loads(raw) if len(raw) <= MAX_LOCK_BYTES else None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        return Holder(data_dir, None, None, None)
    pid, host, url = record.get("pid"), record.get("host"), record.get("url")
    return Holder(
        data_dir,
        pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31 else None,
        host if isinstance(host, str) and _HOST_RE.fullmatch(host) else None,
        url if isinstance(url, str) and _URL_RE.fullmatch(url) else None,
    )


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` names (as uvicorn's own would be), or
    `NotFree` saying who holds the port, or what else stops it."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise NotFree(f"cannot listen on {host}: {exc.strerror}") from None
    addresses = list(dict.fromkeys((family, address) for family, _, _, _, address in infos))
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            if port == 0 and sockets:  # every address on the port the first one was given
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(_listen(family, address))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise NotFree(_in_use(host, port)) from None
        raise NotFree(
            f"cannot listen on {web_url(host, port).removeprefix('http://')}: {exc.strerror}"
        ) from None
    return sockets


def _listen(family: int, address: tuple[object, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn's: a port whose last connections are in TIME_WAIT can be bound again
        # (on Linux never while another socket listens on it).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # listening now: no other process can take the port until we exit
    except BaseException:
        sock.close()
        raise
    return sock


def _in_use(host: str, port: int) -> str:
    url = web_url(host, port)
    if _is_steamharness(host, port):
        return (
            f"steamharness is already running at {url} (with another data dir);"
            " choose another port with --port"
        )
    return f"port {port} is in use by another program; choose another with --port"


def _is_steamharness(host: str, port: int) -> bool:
    """Whether what listens on `host`:`port` answers `/healthz` as a steamharness server does,
    within PROBE_TIMEOUT_SECONDS in all."""
    if host in WILDCARD:
        host = "::1" if host == "::" else "127.0.0.1"
    deadline = time.monotonic() + PROBE_TIMEOUT_SECONDS
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS) as sock:
            sock.sendall(b"GET /healthz HTTP/1.0\r\nConnection: close\r\n\r\n")
            while len(answer) <= MAX_PROBE_BYTES and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                chunk = sock.recv(MAX_PROBE_BYTES)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        return False
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.0 200 ", b"HTTP/1.1 200 ")):
        return False
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("status") == "ok" and "replica" in parsed

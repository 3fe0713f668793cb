"""The test processes' fork server: `steamharness` processes without the interpreter start.

A `steamharness` process spends about a second of CPU (four under `serve`, far more on a
loaded machine) importing the stack before its command does anything, and the suite starts
hundreds of them. This process imports the stack once (`PRELOAD`: every `webui` module and
what its commands import lazily), then forks one child per request. The child takes the
requester's standard streams (passed over the socket), working directory, environment and
argv, and runs the entry point the `steamharness` script runs (`webui.cli.main`) — or, for
an argv naming a `.py` file, that script (the tests' MCP server fixtures) — exiting through
the interpreter's normal end like the script. Only this user's processes are served (the
socket is in a folder of its own, mode 0700, and the peer's uid is checked). The requester
is told the child's pid and, on the same connection, its exit code; closing the
connection before that kills the child, and a child dies with the fork server, so nothing
outlives its test.

What a fork cannot give, and the tests that need it run a real exec instead
(`tests/processes.py`, the `exec_processes` marker): `/proc/PID/cmdline` and
`/proc/PID/environ` show this process's (the kernel keeps the exec's), and the imports
happen before the command's environment is set (nothing in `webui` reads the environment
at import; `tests/test_processes.py` checks the settings and streams a child sees).

Run as `python -m tests.forkserver SOCKET`; it writes one line on stdout when it listens,
and ends when its parent does. One connection per child, SOCK_SEQPACKET: a JSON request
{"argv", "env", "cwd", "umask", "new_session"} with three fds (stdin, stdout, stderr),
answered {"pid": N} or {"error": "..."}, then {"exit": CODE} (negative: the signal that
ended it)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pkgutil
import selectors
import signal
import socket
import struct
import sys
from typing import Any

# Imported lazily by the commands (uvicorn picks its protocol and loop implementations at
# run time); a missing optional one is skipped.
PRELOAD = (
    "uvicorn",
    "uvicorn.main",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "anyio._backends._asyncio",
    "mcp.server.stdio",
    "mcp.client.stdio",
    "mcp.client.streamable_http",
)
MAX_REQUEST = 1 << 20
PR_SET_PDEATHSIG = 1


def preload() -> None:
    import webui

    for module in pkgutil.walk_packages(webui.__path__, "webui."):
        # Alembic's scripts run only under alembic (it loads them itself, from files).
        if module.name.rpartition(".")[2] != "__main__" and ".migrations" not in module.name:
            importlib.import_module(module.name)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    # A requester gone is no error: its child is killed when its connection is seen closed.
    with contextlib.suppress(OSError):
        conn.send(json.dumps(message).encode())


class Children:
    """The forked children: each one's pidfd and the connection that asked for it."""

    def __init__(self) -> None:
        self.by_pidfd: dict[int, tuple[int, socket.socket]] = {}
        self.by_conn: dict[int, int] = {}  # connection fd -> pidfd

    def add(self, pid: int, conn: socket.socket, sel: selectors.BaseSelector) -> None:
        pidfd = os.pidfd_open(pid)
        self.by_pidfd[pidfd] = (pid, conn)
        self.by_conn[conn.fileno()] = pidfd
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        sel.register(conn, selectors.EVENT_READ, "watch")

    def exited(self, pidfd: int, sel: selectors.BaseSelector) -> None:
        pid, conn = self.by_pidfd.pop(pidfd)
        sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        if conn.fileno() >= 0:
            self.by_conn.pop(conn.fileno(), None)
            sel.unregister(conn)
            _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()

    def requester_gone(self, conn: socket.socket, sel: selectors.BaseSelector) -> None:
        pidfd = self.by_conn.pop(conn.fileno())
        sel.unregister(conn)
        pid, _ = self.by_pidfd[pidfd]
        with_suppressed_kill(pid)
        conn.close()  # its pidfd reports the exit, and the child is reaped then

    def kill_all(self) -> None:
        for pid, _ in self.by_pidfd.values():
            with_suppressed_kill(pid)

    def close_in_child(self) -> None:
        for pidfd, (_, conn) in self.by_pidfd.items():
            os.close(pidfd)
            conn.close()


def with_suppressed_kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def serve(listener: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """Fork a child per request until the parent ends (None); in a child, its request."""
    parent = os.getppid()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    children = Children()
    pending: set[socket.socket] = set()  # accepted, their request not read yet
    while True:
        events = sel.select(timeout=1.0)
        if os.getppid() != parent:
            children.kill_all()
            return None
        for key, _ in events:
            try:
                if key.data == "accept":
                    conn, _ = listener.accept()
                    pending.add(conn)
                    sel.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "exit":
                    children.exited(int(key.fd), sel)
                elif key.data == "watch":
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    try:
                        data = conn.recv(16)
                    except OSError:
                        data = b""
                    if not data:
                        children.requester_gone(conn, sel)
                else:
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    pending.discard(conn)
                    sel.unregister(conn)
                    request = _read_request(conn)
                    if request is None:
                        continue
                    pid = os.fork()
                    if pid == 0:
                        sel.close()
                        listener.close()
                        children.close_in_child()
                        for other in pending:
                            other.close()
                        conn.close()
                        return request
                    for fd in request[1]:
                        os.close(fd)
                    children.add(pid, conn, sel)
                    _send(conn, {"pid": pid})
            except Exception as exc:  # one request's failure (no fds left, fork refused) ends only it
                print(f"forkserver: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The request on a new connection, or None (answered with an error and closed)."""
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    except OSError:
        data, fds = b"", []
    # Only this user's processes are served (the folder is this user's alone, too): a child
    # never runs as a user other than its requester's, nor for another user at all.
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    problem = None
    request: Any = None
    if uid != os.getuid():
        problem = "only the fork server's own user is served"
    else:
        try:
            request = json.loads(data)
            if not (len(fds) == 3 and isinstance(request, dict) and isinstance(request.get("argv"), list)):
                problem = "a request is JSON {argv, env, cwd, umask, new_session} with three fds"
        except (ValueError, RecursionError):
            problem = "a request is JSON"
    if problem is not None:
        for fd in fds:
            os.close(fd)
        _send(conn, {"error": problem})
        conn.close()
        return None
    return request, fds


def _stream(fd: int, template: Any, *, write: bool, unbuffered: bool) -> Any:
    """A standard stream on `fd` made as the interpreter makes it at start."""
    import io

    raw = io.FileIO(fd, "w" if write else "r", closefd=False)
    buffer: Any
    if write and unbuffered:
        buffer = raw
    elif write:
        buffer = io.BufferedWriter(raw)
    else:
        buffer = io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffer,
        encoding=template.encoding,
        errors=template.errors,
        line_buffering=raw.isatty() or (write and fd == 2),
        write_through=write and unbuffered,
    )


def become(request: dict[str, Any], fds: list[int]) -> list[str]:
    """In the child: take the requester's streams, directory, environment, umask and
    session; its argv."""
    import tempfile

    from webui.runs import procs

    # Ended with the fork server (which ends with its test process), as the requester's own
    # child would be by its end; a fork server already gone is seen by the parent check.
    procs.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(70)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.closerange(3, 65536)  # only the three streams, as an exec with close_fds gives
    os.chdir(request.get("cwd") or "/")
    os.umask(int(request.get("umask", 0o022)))
    if request.get("new_session"):
        os.setsid()
    os.environ.clear()
    os.environ.update(request.get("env") or {})
    tempfile.tempdir = None
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = _stream(0, sys.__stdin__, write=False, unbuffered=False)
    sys.stdout = sys.__stdout__ = _stream(1, sys.__stdout__, write=True, unbuffered=unbuffered)
    sys.stderr = sys.__stderr__ = _stream(2, sys.__stderr__, write=True, unbuffered=unbuffered)
    return [str(a) for a in request["argv"]]


def main() -> int | None:
    path = sys.argv[1]
    preload()
    # The imported objects stay out of the children's collections: a collection would touch
    # (and so copy) every page they share with this process.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    print("ready", flush=True)
    served = serve(listener)
    if served is None:
        return 0
    argv = become(*served)
    sys.argv = argv
    sys.orig_argv = [sys.executable, *argv]
    sys.path[0] = os.path.dirname(argv[0])  # as for a script: its folder first
    if argv[0].endswith(".py"):  # a Python script (a test's MCP server fixture)
        import runpy

        runpy.run_path(argv[0], run_name="__main__")
        return 0
    # As the script runs it (click names the program after argv[0] only then).
    globals().update(__package__=None, __spec__=None)
    from webui.cli import main as steamharness

    return steamharness()  # type: ignore[func-returns-value]


if __name__ == "__main__":
    sys.exit(main())

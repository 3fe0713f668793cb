"""The fork server: one warm process that forks a fresh child per run.

Started once by the worker pool (`python -m webui.runs.zygote SOCKET`). It imports the
child runtime (and the stdlib modules handlers commonly use) once, then for each command
line on stdin forks a child that connects back to SOCKET. Forking a warm interpreter
costs milliseconds; starting a cold one that imports the stack costs about a second.

It reports on stdout, one JSON line each: `{"type": "forked", "token", "pid"}` and
`{"type": "exit", "pid", "code", "signal"}` when it reaps a child. When stdin closes (the
pool, or the whole server, went away) it kills every child it forked and exits.

Single-threaded on purpose: forking a process with threads is unsafe.
"""

from __future__ import annotations

import contextlib

# Preloaded for every child: the runtime and what handlers commonly import.
import csv  # noqa: F401
import datetime  # noqa: F401
import gc
import hashlib  # noqa: F401
import json
import os
import pathlib  # noqa: F401
import re  # noqa: F401
import select
import signal
import subprocess  # noqa: F401
import sys
import time  # noqa: F401
import urllib.parse  # noqa: F401

from webui.runs import child


def _report(msg: dict[str, object]) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def _reap(children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        _report({"type": "exit", "pid": pid, "code": code, "signal": sig})


def main(sock_path: str) -> None:
    # Move everything imported so far out of the collector's reach: a child's GC passes
    # then never touch (and copy-on-write) the zygote's pages.
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool, not a terminal, ends us
    children: set[int] = set()
    buf = b""
    _report({"type": "ready", "pid": os.getpid()})
    while True:
        readable: list[int] = []
        with contextlib.suppress(InterruptedError):
            readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 4096):
                    pass
            _reap(children)
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            cmd = json.loads(line)
            pid = os.fork()
            if pid == 0:
                os.close(wake_r)
                os.close(wake_w)
                child.run_child(sock_path, cmd)
            children.add(pid)
            _report({"type": "forked", "token": cmd["token"], "pid": pid})
    for pid in list(children):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _reap(children)


if __name__ == "__main__":
    main(sys.argv[1])

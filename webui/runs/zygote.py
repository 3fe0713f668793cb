"""The fork server: one warm process that forks a fresh child per run.

Started once by the worker pool (`python -m webui.runs.zygote SOCKET`). It imports the
child runtime (and the stdlib modules handlers commonly use) once, then for each command
line on stdin forks a child that connects back to SOCKET. Forking a warm interpreter
costs milliseconds; starting a cold one that imports the stack costs about a second.

With a second argument (a `webui.runs.view.ViewConfig` as JSON) every worker gets a
filesystem view of its own: the zygote builds the system part once, in a mount namespace
of its own, and probes whether a worker can build and enter its view; its ready message
says why not (`viewProblem`; null: it can).

It reports on stdout, one JSON line each: `{"type": "ready", "pid"[, "viewProblem"]}`
once, `{"type": "forked", "token", "pid"}` and `{"type": "exit", "pid", "code", "signal"}`
when it reaps a child. When stdin closes (the pool, or the whole server, went away) it
kills every child it forked and exits.

It is a child subreaper: whatever a run leaves behind (a daemon whose worker was killed, a
process cloned as the worker's sibling) becomes its child, and any child that is not one
of its workers is killed on sight. A worker's exit is reported only once those are gone.
It is also not dumpable, so a process of the same user cannot read its memory or
/proc/<pid>/environ (which is scrubbed of the server's secrets anyway).

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
import time
import urllib.parse  # noqa: F401

from webui.runs import child, procs, view

# How long a worker's exit report may wait for the strays killed after it to be reaped
# (a SIGKILLed process is gone at once unless stuck in uninterruptible I/O).
STRAY_WAIT_SECONDS = 2.0


def _report(msg: dict[str, object]) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def _reap(workers: set[int], exits: list[dict[str, object]]) -> None:
    """Reap every child that exited; note the workers' statuses."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in workers:
            workers.discard(pid)
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            exits.append({"type": "exit", "pid": pid, "code": code, "signal": sig})


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _settle(workers: set[int], wake_r: int) -> None:
    """Reap, kill every child that is not a worker until none is left (bounded), then
    report the workers that exited: a run's leftovers are dead by the time its exit is
    known."""
    exits: list[dict[str, object]] = []
    deadline = time.monotonic() + STRAY_WAIT_SECONDS
    _reap(workers, exits)
    while strays := [pid for pid in procs.children(os.getpid()) if pid not in workers]:
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with contextlib.suppress(InterruptedError):
            select.select([wake_r], [], [], left)  # SIGCHLD: one of them died
        _drain(wake_r)
        _reap(workers, exits)
    for msg in exits:
        _report(msg)


def main(sock_path: str, view_config: view.ViewConfig | None = None) -> None:
    ready: dict[str, object] = {"type": "ready", "pid": os.getpid()}
    plan: view.View | None = None
    if view_config is not None:
        # Before anything below: the probe forks, and is reaped here, not by the loop.
        try:
            plan = view.View.plan(view_config)
            problem = view.probe(plan)
        except OSError as exc:
            problem = str(exc)
        ready["viewProblem"] = problem
        if problem is not None:
            plan = None  # the workers use the host's filesystem: the pool says so
    # Move everything imported so far out of the collector's reach: a child's GC passes
    # then never touch (and copy-on-write) the zygote's pages.
    gc.freeze()
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
    procs.prctl(procs.PR_SET_DUMPABLE, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool, not a terminal, ends us
    children: set[int] = set()
    buf = b""
    _report(ready)
    while True:
        readable: list[int] = []
        with contextlib.suppress(InterruptedError):
            readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            _drain(wake_r)
            _settle(children, wake_r)
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
                child.run_child(sock_path, cmd, plan)
            children.add(pid)
            _report({"type": "forked", "token": cmd["token"], "pid": pid})
    for pid in list(children):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    # Nothing reports to anyone any more: every child, worker or not, goes.
    procs.kill_descendants()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else None)

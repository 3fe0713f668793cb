"""Process-tree primitives shared by the zygote and the worker: prctl and "kill every
child". Standard library only: the zygote preloads this module.

Linux only in effect: elsewhere `prctl` reports False and the tree helpers find no
children, so the worker model still runs, without the guarantees.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_libc: ctypes.CDLL | None = None


def prctl(option: int, value: int) -> bool:
    """Set one process attribute; False where prctl does not exist, OSError if it refuses."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(_libc, "prctl", None)
    if func is None:
        return False
    if func(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")
    return True


def children(pid: int) -> list[int]:
    """The direct children of `pid`, zombies included (they are still its to reap).

    Reads /proc/<pid>/task/*/children where the kernel has it, else scans every
    /proc/<n>/stat for the parent field (a fraction of a millisecond per hundred
    processes)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    if os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        found: set[int] = set()
        for tid in tids:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in _read(f"/proc/{pid}/task/{tid}/children").split())
        return sorted(found)
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = _read(f"/proc/{name}/stat")
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and parentheses
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(name))
    return out


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def kill_descendants(max_rounds: int = 64) -> bool:
    """Kill every descendant of this process, which must be a child subreaper (so
    orphans of killed children become its own children and the next round finds them).
    Reaps them all. True once none is left; False if some keep coming back (a thread
    still forking), after `max_rounds`."""
    me = os.getpid()
    for _ in range(max_rounds):
        while True:  # reap whatever already exited; ECHILD: nothing left at all
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                break
        kids = children(me)
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in kids:
            # SIGKILLed: this returns as soon as the kernel tore the process down
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return False

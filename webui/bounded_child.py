"""Work on hostile input in a child process that bounds can stop.

Where a parser of someone else's bytes decides the cost (pypdf on a crafted PDF, CPython's
compiler on a crafted source file), the cost is paid by a child process, never by the
server's event loop or one of its threads: `python -I -m webui.bounded_child MODULE:FUNCTION
...` limits itself before it imports MODULE — address space (RLIMIT_AS), CPU seconds
(RLIMIT_CPU), the files it may write (RLIMIT_FSIZE, none by default), no core file — makes
itself undumpable and unable to gain privileges, then calls FUNCTION with the bytes it reads
from stdin and writes the bytes FUNCTION returns to stdout (at most `output_bytes`; an
exception is reported as its type and a bounded message, never its data). The parent
kills the child's process group once its wall-clock bound passes, reads at most
`output_bytes` of its stdout, and says why a child failed (`ChildFailed.reason`).

The child gets no environment of the server's (no keys, no database URL): only a locale and
what the dynamic linker needs, `/` as its folder, no descriptors but its pipes. With `run_as`
(a server running as root) it switches to that unprivileged user, with no groups, once its
limits are set and its target imported, before it reads a byte of input, with empty `/tmp`,
`/var/tmp` and `/dev/shm` of its own (a mount namespace: nothing made there outlives it); folders of the
import path it can no longer reach by name (Python under a private home) stay reachable
through descriptors it opened before, as a run's worker does (webui.runs.child).

`run_child` is for async code (it waits without blocking the event loop, and a cancelled
caller kills the child); `run_child_blocking` for the CLI and code already in a thread.
Standard library only, up to the target's import (anyio is imported by `run_child` alone).
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

Reason = Literal["time", "memory", "output", "error"]

MEMORY_EXIT = 3  # the target ran out of its address space
OUTPUT_EXIT = 4  # the target returned more than the parent reads
ERROR_EXIT = 5  # the target raised
MAX_ERROR_BYTES = 2048  # of a child's stderr the parent keeps (for the log)
_CHUNK = 64 * 1024  # read from or written to a child's pipe at once
# What the child keeps of the server's environment: what the interpreter needs to start.
CHILD_ENV_NAMES = ("LD_LIBRARY_PATH",)


@dataclass(frozen=True)
class Bounds:
    """A child's bounds. `seconds`: from its start to its exit (the parent kills it past
    that; its CPU limit is a second above, for a parent that could not); `file_bytes`: the
    largest file it may write (0: none)."""

    seconds: float
    address_space_bytes: int = 1024 * 1024 * 1024
    output_bytes: int = 1024 * 1024
    file_bytes: int = 0

    @property
    def cpu_seconds(self) -> int:
        return math.ceil(self.seconds) + 1


@dataclass(frozen=True)
class RunAs:
    """The unprivileged user a child of a root server runs as."""

    uid: int
    gid: int


class ChildFailed(Exception):
    """The child gave no result: it ran past its time (`time`), out of its address space
    (`memory`), returned more than its output bound (`output`), or failed (`error`)."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason
        self.detail = detail


# ----------------------------------------------------------------------------- the parent


def child_argv(target: str, bounds: Bounds, run_as: RunAs | None = None) -> list[str]:
    return [
        sys.executable,
        "-I",  # none of the environment's PYTHON* variables, no user site, no cwd on sys.path
        "-m",
        __name__,
        target,
        str(bounds.address_space_bytes),
        str(bounds.cpu_seconds),
        str(bounds.output_bytes),
        str(bounds.file_bytes),
        f"{run_as.uid}:{run_as.gid}" if run_as is not None else "-",
    ]


def child_env() -> dict[str, str]:
    env = {"LC_ALL": "C.UTF-8"}
    env.update({name: os.environ[name] for name in CHILD_ENV_NAMES if name in os.environ})
    return env


def _kill(pid: int) -> None:
    """The child and anything it started (it leads its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _judge(returncode: int, *, timed_out: bool, over: bool, stderr: bytes) -> ChildFailed | None:
    if over or returncode == OUTPUT_EXIT:  # first: the parent killed it for that
        return ChildFailed("output")
    if timed_out or returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return ChildFailed("time")
    if returncode == MEMORY_EXIT:
        return ChildFailed("memory")
    if returncode != 0:
        said = stderr[-MAX_ERROR_BYTES:].decode("utf-8", "replace").strip()
        return ChildFailed("error", f"exit {returncode}: {said}" if said else f"exit {returncode}")
    return None


def run_child_blocking(
    target: str, payload: bytes, bounds: Bounds, *, run_as: RunAs | None = None, cwd: Path | None = None
) -> bytes:
    """FUNCTION(payload) of `target` ("module:function") in a bounded child; waits in this
    thread. `cwd`: its working folder (by default `/`), entered before it drops to `run_as`,
    so it stays reachable there. Raises ChildFailed."""
    try:
        proc = subprocess.Popen(
            child_argv(target, bounds, run_as),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=cwd or "/",
            start_new_session=True,
        )
    except OSError as exc:
        raise ChildFailed("error", f"could not start: {exc.strerror or exc}") from None
    timed_out = over = False
    out, err = b"", b""
    try:
        # Code the child runs (a handler file's import) may write to its stdout itself:
        # never more than `output_bytes` of it is read, whatever the child does.
        out, err, over = _exchange(proc, payload, bounds.output_bytes, time.monotonic() + bounds.seconds)
        timed_out = not over and proc.returncode is None
    finally:
        if proc.returncode is None or timed_out or over:
            _kill(proc.pid)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:  # never wait for an end of file a grandchild could hold
                with contextlib.suppress(OSError):
                    pipe.close()
    returncode = proc.wait()
    failed = _judge(returncode, timed_out=timed_out, over=over, stderr=err)
    if failed is not None:
        raise failed
    return out


def _exchange(
    proc: subprocess.Popen[bytes], payload: bytes, cap: int, deadline: float
) -> tuple[bytes, bytes, bool]:
    """Feed `payload` to the child's stdin while reading its stdout (at most `cap` bytes)
    and the end of its stderr (its last `MAX_ERROR_BYTES`), until both end and the child
    exits or `deadline` passes: (stdout, stderr, whether stdout went past `cap`)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    view, sent = memoryview(payload), 0
    with selectors.DefaultSelector() as selector:
        if payload:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), False
            for key, _ in selector.select(left):
                pipe = key.fileobj
                if pipe is proc.stdin:
                    try:
                        sent += os.write(proc.stdin.fileno(), view[sent : sent + _CHUNK])
                    except BrokenPipeError:
                        sent = len(view)
                    if sent >= len(view):
                        selector.unregister(pipe)
                        with contextlib.suppress(OSError):
                            proc.stdin.close()
                    continue
                data = os.read(key.fd, _CHUNK)
                if not data:
                    selector.unregister(pipe)
                elif pipe is proc.stdout:
                    out += data
                    if len(out) > cap:
                        return bytes(out[: cap + 1]), bytes(err), True
                else:
                    err = (err + data)[-MAX_ERROR_BYTES:]
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    return bytes(out), bytes(err), False


async def run_child(
    target: str, payload: bytes, bounds: Bounds, *, run_as: RunAs | None = None, cwd: Path | None = None
) -> bytes:
    """`run_child_blocking` for async code: the event loop waits on the child's pipes; a
    caller cancelled meanwhile kills it."""
    import anyio
    from anyio.abc import ByteReceiveStream

    try:
        proc = await anyio.open_process(
            child_argv(target, bounds, run_as), env=child_env(), cwd=cwd or "/", start_new_session=True
        )
    except OSError as exc:
        raise ChildFailed("error", f"could not start: {exc.strerror or exc}") from None
    out = bytearray()
    err = bytearray()
    over = False

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await proc.stdin.send(payload)
        with contextlib.suppress(OSError):
            await proc.stdin.aclose()

    async def read(stream: ByteReceiveStream | None, into: bytearray, cap: int, kill: bool) -> None:
        nonlocal over
        assert stream is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in stream:
                into += chunk[: max(0, cap + 1 - len(into))]
                if len(into) > cap and kill:
                    over = True
                    _kill(proc.pid)
                    return

    try:
        with anyio.move_on_after(bounds.seconds) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(read, proc.stdout, out, bounds.output_bytes, True)
                tg.start_soon(read, proc.stderr, err, MAX_ERROR_BYTES, False)
            await proc.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                _kill(proc.pid)
            await proc.aclose()
    returncode = proc.returncode
    assert returncode is not None
    failed = _judge(returncode, timed_out=deadline.cancelled_caught, over=over, stderr=bytes(err))
    if failed is not None:
        raise failed
    return bytes(out)


# ------------------------------------------------------------------------------ the child


def _prctl(option: int, value: int) -> None:
    """As webui.runs.procs.prctl (this module may not import the runs layer)."""
    import ctypes

    func = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if func is not None:
        func(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _limit_self(address_space: int, cpu_seconds: int, file_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _become(uid: int, gid: int) -> None:
    """That user for good (no groups, real = effective = saved ids), the import path's
    folders still reachable (as webui.runs.child: `_hold_import_dirs`, `_reach_import_dirs`)."""
    held: dict[int, int] = {}
    for index, entry in enumerate(sys.path):
        if entry and os.path.isdir(entry):
            with contextlib.suppress(OSError):
                held[index] = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
    _private_temporaries()
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError("could not switch to the unprivileged user")
    import resource

    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no process of its own (root would ignore it)
    moved: dict[str, str] = {}
    for index, fd in held.items():
        if os.access(sys.path[index], os.R_OK | os.X_OK):
            os.close(fd)
        else:
            moved[sys.path[index]] = sys.path[index] = f"/proc/self/fd/{fd}"
    # Packages imported already (`encodings`, ...) find their submodules by their own path.
    for module in list(sys.modules.values()):
        paths = getattr(module, "__path__", None)
        if isinstance(paths, list):
            paths[:] = [_moved(str(path), moved) for path in paths]
    sys.path_importer_cache.clear()


# A mount namespace of the child's own (as webui.runs.view, which this module may not import).
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 1 << 18
TEMPORARIES = ("/tmp", "/var/tmp", "/dev/shm")
# Each of the child's own temporary folders: small, and few names in it.
_TEMPORARY_MOUNT = b"size=1m,nr_inodes=64,mode=1777"


def _private_temporaries() -> None:
    """Empty temporary folders of the child's own (`TEMPORARIES`, gone with it), in a mount
    namespace of its own, so that what the code it runs makes there (a handler file's import)
    never outlives it nor reaches the host's; as root, before it drops to its user. Where
    the platform refuses a namespace or a mount, the host's stay (closed only by modes)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return
    # Private first: a mount made while / is shared would be the host's too.
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return
    for place in TEMPORARIES:
        if os.path.isdir(place) and not os.path.islink(place):
            libc.mount(b"tmpfs", place.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, _TEMPORARY_MOUNT)


def _moved(path: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        if path == old or path.startswith(old.rstrip("/") + "/"):
            return new + path[len(old.rstrip("/")) :]
    return path


def _report(message: str, code: int) -> NoReturn:
    sys.stderr.write(message[:MAX_ERROR_BYTES] + "\n")
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str]) -> None:
    target, address_space, cpu_seconds, output_bytes, file_bytes, user = argv[:6]
    _limit_self(int(address_space), int(cpu_seconds), int(file_bytes))
    module_name, _, function_name = target.partition(":")
    try:
        import importlib

        function = getattr(importlib.import_module(module_name), function_name)
        if user != "-":
            uid, _, gid = user.partition(":")
            _become(int(uid), int(gid))
        _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS: no setuid program raises it again
        _prctl(4, 0)  # PR_SET_DUMPABLE 0: a process of the same user cannot read its memory
        result = function(sys.stdin.buffer.read())
        if not isinstance(result, bytes):
            raise TypeError(f"{target} returned {type(result).__name__}, not bytes")
    except MemoryError:
        _report("out of memory", MEMORY_EXIT)
    except BaseException as exc:  # the child's top level: a short, bounded report
        try:
            said = str(exc)[:500]
        except BaseException:  # a message that cannot be made is left out
            said = ""
        _report(f"{type(exc).__name__}: {said}", ERROR_EXIT)
    if len(result) > int(output_bytes):
        _report(f"{len(result)} bytes of output", OUTPUT_EXIT)
    sys.stdout.buffer.write(result)
    sys.stdout.buffer.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])

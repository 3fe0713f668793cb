"""A published snapshot's Python files compiled once, when it is published.

A run's worker is a fresh fork that cannot write bytecode anywhere (it runs as a user of
its own, and the snapshot is not its to write): without a `__pycache__` in the snapshot,
every run compiled its handler from source, which cost more than the rest of the worker's
start. The snapshot never changes once published, so its bytecode is written next to its
sources at publish time — compiled from the copied sources (a `.pyc` that came with the
draft is never copied), timestamp-checked as Python always does, so a source that differs
from what was compiled is compiled from source again. The worker's ordinary import
machinery finds it; it needs no cache of its own and no memory shared between runs.

The draft's code is hostile input: compiling executes none of it, but CPython's compiler
can take minutes and gigabytes on a crafted file while it holds the GIL. So the compiling
is done by a bounded child process (webui.bounded_child: `compile_child`, standard library
only) with an address-space, CPU and file-size limit and a wall-clock bound: a child that
hits one is killed, what it compiled so far is kept (each `.pyc` is written atomically),
and the rest is left to the runs, which compile from source as before. Bounded further: at
most MAX_FILES files of at most MAX_FILE_BYTES each, MAX_TOTAL_BYTES in all; a file that
does not compile is left to its runs (which report the error as before). Symlinks are not
followed."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import py_compile
import stat
from pathlib import Path

from webui.bounded_child import Bounds, ChildFailed, run_child, run_child_blocking

log = logging.getLogger(__name__)

MAX_FILES = 2000
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 16 * 1024 * 1024  # of source compiled per publish; the rest is left to runs
# The child's bounds: the whole compile, its address space, each file it writes.
TIMEOUT_SECONDS = 20.0
ADDRESS_SPACE_BYTES = 1024 * 1024 * 1024
PYC_BYTES = 64 * 1024 * 1024


def compile_snapshot(folder: Path, *, timeout: float = TIMEOUT_SECONDS) -> int:
    """Write `__pycache__` bytecode for the `.py` files under `folder` in a bounded child
    process; how many it compiled (0 when it was stopped or failed: publish goes on). Waits
    in this thread (the CLI); the server uses `compile_snapshot_async`."""
    payload, bounds = _child_call(folder, timeout)
    try:
        out = run_child_blocking(CHILD_TARGET, payload, bounds)
    except ChildFailed as exc:
        return _stopped(folder, timeout, exc)
    return _compiled(out)


async def compile_snapshot_async(folder: Path, *, timeout: float = TIMEOUT_SECONDS) -> int:
    """`compile_snapshot` for async code: the event loop waits on the child's pipes, so a
    crafted file that compiles for the whole bound holds no thread (and no database
    connection) meanwhile."""
    payload, bounds = _child_call(folder, timeout)
    try:
        out = await run_child(CHILD_TARGET, payload, bounds)
    except ChildFailed as exc:
        return _stopped(folder, timeout, exc)
    return _compiled(out)


CHILD_TARGET = f"{__name__}:compile_child"


def _child_call(folder: Path, timeout: float) -> tuple[bytes, Bounds]:
    """What the child is given (the folder and the folders that are not code), and its bounds."""
    from webui.workflows.targets import SKIP_DIRS  # (the child imports only the stdlib)

    payload = json.dumps({"folder": str(folder), "skip": sorted(SKIP_DIRS)}).encode()
    bounds = Bounds(
        seconds=timeout, address_space_bytes=ADDRESS_SPACE_BYTES, output_bytes=64, file_bytes=PYC_BYTES
    )
    return payload, bounds


def _stopped(folder: Path, timeout: float, exc: ChildFailed) -> int:
    if exc.reason == "time":
        log.warning(
            "%s: compiling its Python files took over %g s; its runs compile the rest", folder, timeout
        )
    else:
        log.warning(
            "%s: compiling its Python files stopped (%s); its runs compile the rest",
            folder,
            exc.detail or exc.reason,
        )
    return 0


def _compiled(out: bytes) -> int:
    try:
        return int(out.strip() or 0)
    except ValueError:
        return 0


def compile_child(payload: bytes) -> bytes:
    """In the bounded child: `payload` names the folder and the folders to skip; how many
    files it compiled."""
    spec = json.loads(payload)
    return str(compile_folder(Path(spec["folder"]), frozenset(spec["skip"]))).encode()


def compile_folder(folder: Path, skip_dirs: frozenset[str]) -> int:
    """In the child: compile what is under `folder` (not in `skip_dirs` or hidden folders);
    how many files."""
    compiled = 0
    seen = 0
    budget = MAX_TOTAL_BYTES
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and not d.startswith("."))
        here = compiled
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_FILES:
                break
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES or st.st_size > budget:
                continue
            budget -= st.st_size
            try:
                py_compile.compile(
                    path,
                    cfile=importlib.util.cache_from_source(path),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
            except (py_compile.PyCompileError, OSError, ValueError, MemoryError, RecursionError):
                continue  # its runs compile it (and report its error)
            compiled += 1
        if compiled > here:
            _like_its_folder(Path(dirpath))
        if seen > MAX_FILES:
            break
    return compiled


def _like_its_folder(folder: Path) -> None:
    """`__pycache__` with its folder's mode (made under the server's umask, it could be
    closed to the runs that read the folder); each `.pyc` already has its source's."""
    cache = folder / "__pycache__"
    with contextlib.suppress(OSError):
        os.chmod(cache, stat.S_IMODE(os.stat(folder).st_mode))

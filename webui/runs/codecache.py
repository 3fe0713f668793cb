"""Workflow code compiled once in the zygote, used by every worker forked after it.

A run's worker is a fresh fork, so whatever it compiles dies with it: a handler file read
and compiled from source on every run (published snapshots carry no bytecode, and a
worker user may not write any) costs more than the rest of the worker's start. Instead,
the pool asks the zygote to `warm` a project folder when one of its runs starts: the
zygote compiles the folder's Python files (bounded, see below) and keeps the code objects,
which every child forked afterwards inherits for free (copy-on-write, never written).

The zygote compiles as root; a worker may use a compiled file only if it can read it
itself: `cached_code` is handed the open file (opened by the worker, as the worker user),
and the code is used only when that file is the very one compiled (device, inode, size,
modification time). A file the worker cannot open, or one that changed since (a draft
being edited), is compiled by the worker from its source as before. The zygote reads
only regular files that are not symlinks, under folders that are not symlinks, and
compiling runs none of their code.

Standard library only (the zygote preloads it, see webui.runs.child)."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from types import CodeType
from typing import Any

try:  # CPython's own loader uses it to name a cached code object after its actual path
    from _imp import _fix_co_filename as _fix_filename  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - other interpreters: keep the name it was compiled as
    _fix_filename = None

# Bounds of one warm-up and of what the zygote keeps: a project with more (or larger)
# files still runs, the rest is compiled by its workers.
MAX_FILES_PER_FOLDER = 512
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 8
# One warm-up compiles at most this much source, for at most this long: the zygote forks
# every run's worker, and a folder of huge files must not hold them up.
MAX_WARM_BYTES = 8 * 1024 * 1024
MAX_WARM_SECONDS = 0.25
MAX_CACHED_BYTES = 16 * 1024 * 1024  # of source compiled; past it the cache starts over
MAX_FOLDERS = 1024
# A folder is walked again (for changed files) at most this often.
REWARM_SECONDS = 2.0
# Not workflow code: left to the worker should anything import from there.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", ".git", ".venv", "venv", ".hg", ".svn"})

# (st_dev, st_ino) -> (st_size, st_mtime_ns, code)
_compiled: dict[tuple[int, int], tuple[int, int, CodeType]] = {}
_cached_bytes = 0
_warmed: dict[str, float] = {}  # folder -> when it was last walked (monotonic)


def warm(root: str) -> int:
    """In the zygote: compile the Python files under `root` not compiled yet (or changed
    since); returns how many were compiled now. Never raises for what the folder holds."""
    now = time.monotonic()
    last = _warmed.get(root)
    if last is not None and now - last < REWARM_SECONDS:
        return 0
    if len(_warmed) >= MAX_FOLDERS:  # a bound on the bookkeeping itself
        _warmed.clear()
    _warmed[root] = now
    compiled = 0
    budget = MAX_WARM_BYTES
    for path, st in _python_files(root):
        key = (st.st_dev, st.st_ino)
        known = _compiled.get(key)
        if known is not None and known[:2] == (st.st_size, st.st_mtime_ns):
            continue
        budget -= st.st_size
        if budget < 0 or time.monotonic() - now > MAX_WARM_SECONDS:
            break  # the rest is compiled by the workers (or by a later warm-up)
        code = _compile(path, st)
        if code is not None:
            _remember(key, st, code)
            compiled += 1
    return compiled


def _python_files(root: str) -> list[tuple[str, os.stat_result]]:
    """Regular `.py` files under `root` (no symlinks followed), breadth first, bounded."""
    found: list[tuple[str, os.stat_result]] = []
    folders = [(root, 0)]
    while folders and len(found) < MAX_FILES_PER_FOLDER:
        folder, depth = folders.pop(0)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if (
                        depth < MAX_DEPTH
                        and entry.name not in SKIPPED_DIRS
                        and not entry.name.startswith(".")
                    ):
                        folders.append((entry.path, depth + 1))
                    continue
                if not entry.name.endswith(".py"):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
                found.append((entry.path, st))
                if len(found) >= MAX_FILES_PER_FOLDER:
                    break
    return found


def _compile(path: str, st: os.stat_result) -> CodeType | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino, opened.st_size, opened.st_mtime_ns) != (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
        ):
            return None  # replaced or rewritten meanwhile: its worker compiles it
        with os.fdopen(fd, "rb", closefd=False) as fh:
            source = fh.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(source) != st.st_size:
        return None
    try:
        return compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return None  # the worker compiles it again and reports the error as the run's


def _remember(key: tuple[int, int], st: os.stat_result, code: CodeType) -> None:
    global _cached_bytes
    if _cached_bytes + st.st_size > MAX_CACHED_BYTES:
        _compiled.clear()
        _cached_bytes = 0
    old = _compiled.get(key)
    if old is not None:
        _cached_bytes -= old[0]
    _compiled[key] = (st.st_size, st.st_mtime_ns, code)
    _cached_bytes += st.st_size


def cached_code(fd: int, path: str) -> CodeType | None:
    """In a worker: the code compiled for the file open at `fd` (opened by the worker
    itself) if it is unchanged since, named after `path`; else None."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    known = _compiled.get((st.st_dev, st.st_ino))
    if known is None or known[:2] != (st.st_size, st.st_mtime_ns) or not stat.S_ISREG(st.st_mode):
        return None
    code = known[2]
    if _fix_filename is not None and code.co_filename != path:
        _fix_filename(code, path)
    return code


def code_for(path: str) -> CodeType | None:
    """In a worker: `cached_code` for the file at `path`, opened as the worker (None when it
    cannot open it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return cached_code(fd, path)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def stats() -> dict[str, Any]:
    """What the cache holds (for tests and diagnostics)."""
    return {"files": len(_compiled), "bytes": _cached_bytes, "folders": len(_warmed)}

"""A published snapshot's Python files compiled once, when it is published.

A run's worker is a fresh fork that cannot write bytecode anywhere (it runs as a user of
its own, and the snapshot is not its to write): without a `__pycache__` in the snapshot,
every run compiled its handler from source, which cost more than the rest of the worker's
start. The snapshot never changes once published, so its bytecode is written next to its
sources at publish time — compiled by the server from the copied sources (a `.pyc` that
came with the draft is never copied), timestamp-checked as Python always does, so a source
that differs from what was compiled is compiled from source again. The worker's ordinary
import machinery finds it; it needs no cache of its own and no memory shared between runs.

Bounded: at most MAX_FILES files of at most MAX_FILE_BYTES each, MAX_TOTAL_BYTES in all; a
file that does not compile is left to the run (which reports its error as before).
Symlinks are not followed."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import py_compile
import stat
from pathlib import Path

from webui.workflows.targets import SKIP_DIRS

log = logging.getLogger(__name__)

MAX_FILES = 2000
MAX_FILE_BYTES = 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024  # of source compiled per publish; the rest is left to runs


def compile_snapshot(folder: Path) -> int:
    """Write `__pycache__` bytecode for the `.py` files under `folder`; how many compiled."""
    compiled = 0
    seen = 0
    budget = MAX_TOTAL_BYTES
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_FILES:
                return compiled
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
            except (py_compile.PyCompileError, OSError, ValueError, MemoryError, RecursionError) as exc:
                log.debug("%s: not compiled ahead (%s); its runs compile it", path, type(exc).__name__)
                continue
            compiled += 1
            _like_its_folder(Path(dirpath))
    return compiled


def _like_its_folder(folder: Path) -> None:
    """`__pycache__` with its folder's mode (made under the server's umask, it could be
    closed to the runs that read the folder); each `.pyc` already has its source's."""
    cache = folder / "__pycache__"
    with contextlib.suppress(OSError):
        os.chmod(cache, stat.S_IMODE(os.stat(folder).st_mode))

"""Who workflow code runs as, and what of the server it can see.

Workflow code is untrusted. When the server runs as root, every run's worker drops to an
unprivileged user before any workflow code runs: a uid of its own, taken from a range
(`worker_uid_base`, `worker_uid_count`) that has no passwd entry, with the same number as
its only group. Two runs (of one account or of two) then cannot signal each other or read
each other's `/proc/<pid>/` (environ, cwd, fd), even through a process the handler
started (an exec'd program is dumpable again). Where the platform cannot switch to the
range (a user namespace that does not map it), or the range is set empty, every run
drops to `worker_user` (default `nobody`) instead, which still keeps it away from the
server but not from other runs.

What of the disk a run can reach: under root, a filesystem view of its own
(webui.runs.view; `ViewSettings` in webui.runs.pool), with the operator's `read_paths`.

The zygote and the workers start from a scrubbed environment; the server and the zygote
are not dumpable, so a process of the same user cannot read their memory or
`/proc/<pid>/environ`.
"""

from __future__ import annotations

import collections
import contextlib
import grp
import logging
import os
import pwd
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from webui.errors import ConfigError
from webui.runs import procs
from webui.runs.env import server_base_env
from webui.runs.messages import WorkerUserSpec

log = logging.getLogger(__name__)

# Besides what runs get from the server's environment: what its interpreter needs to start.
_INTERPRETER_NAMES = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class WorkerUser:
    name: str
    uid: int
    gid: int

    def to_spec(self) -> WorkerUserSpec:
        return {"name": self.name, "uid": self.uid, "gid": self.gid}


def worker_user(
    name: str | None, *, setting: str = "worker_user", what: str = "workflow code"
) -> WorkerUser | None:
    """The user runs (or, as `what`, the host's stdio servers) drop to, or None when they
    keep the server's user: the server is not root (it cannot switch), or the setting is
    empty (an explicit opt-out)."""
    if os.geteuid() != 0:
        return None
    if not name:
        log.warning("%s is empty: %s runs as root, with full access to the server", setting, what)
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise ConfigError(
            f"worker user {name!r} does not exist: create it, set STEAMHARNESS_WORKER_USER to an"
            " unprivileged user, or set it empty to run workflow code as root"
        ) from None
    if pw.pw_uid == 0 or pw.pw_gid == 0:
        raise ConfigError(
            f"worker user {name!r} is root or in group root; set STEAMHARNESS_WORKER_USER to an"
            " unprivileged user (or empty to run workflow code as root on purpose)"
        )
    return WorkerUser(name=name, uid=pw.pw_uid, gid=pw.pw_gid)


class WorkerUids:
    """The per-run uids: handed out least recently used first, so a uid a run gave back is
    the last one taken again. A worker gives its uid back once the zygote reported it gone
    (by then every process it started is dead too)."""

    def __init__(self, base: int, count: int) -> None:
        self.base = base
        self.count = count
        self._free: collections.deque[int] = collections.deque(range(base, base + count))
        self._taken: set[int] = set()

    def acquire(self) -> WorkerUser:
        if not self._free:
            raise RuntimeError(
                f"every one of the {self.count} worker uids is in use; raise STEAMHARNESS_WORKER_UID_COUNT"
            )
        uid = self._free.popleft()
        self._taken.add(uid)
        return WorkerUser(name=f"run{uid - self.base}", uid=uid, gid=uid)

    def release(self, uid: int) -> None:
        if uid in self._taken:
            self._taken.discard(uid)
            self._free.append(uid)

    def in_use(self) -> int:
        return len(self._taken)


# World-writable folders every run can write to outside its scratch dir.
SHARED_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def sweep_shared_temp(uid: int, folders: tuple[str, ...] = SHARED_TEMP_FOLDERS) -> int:
    """Removes what `uid` owns at the top of the shared temporary folders; call it once
    every process of `uid` is gone, before the uid is handed to another run (which would
    own, and so read or trust, whatever the last run left there). Entries are removed
    without following links. Returns how many were removed."""
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError as exc:
                log.warning("could not remove %s left by worker uid %d: %s", entry.path, uid, exc)
    return removed


def worker_uids(base: int, count: int) -> WorkerUids | None:
    """The per-run uid range, or None when runs share `worker_user`: the server is not
    root, the range is empty (`count` 0), or this user namespace does not map all of it.
    A range that overlaps an account or a group (in passwd or group) is refused: its
    runs could act as that account."""
    if os.geteuid() != 0 or count <= 0:
        return None
    end = base + count
    if base <= 0:
        raise ConfigError("STEAMHARNESS_WORKER_UID_BASE must be above 0 (uid 0 is root)")
    for path, what in (("/proc/self/uid_map", "uids"), ("/proc/self/gid_map", "gids")):
        if not is_mapped(path, base, end):
            log.warning(
                "this user namespace does not map the worker %s %d-%d: every run drops to worker_user"
                " instead (set STEAMHARNESS_WORKER_UID_BASE to a mapped range to keep runs apart)",
                what,
                base,
                end - 1,
            )
            return None
    users = sorted(p.pw_name for p in pwd.getpwall() if base <= p.pw_uid < end)
    groups = sorted(g.gr_name for g in grp.getgrall() if base <= g.gr_gid < end)
    if users or groups:
        names = ", ".join([*(f"user {n}" for n in users), *(f"group {n}" for n in groups)][:5])
        raise ConfigError(
            f"the worker uid range {base}-{end - 1} (STEAMHARNESS_WORKER_UID_BASE, _COUNT) holds"
            f" {names}: choose a range no account or group uses"
        )
    return WorkerUids(base, count)


def is_mapped(path: str, start: int, end: int) -> bool:
    """Whether ids `start` to `end - 1` all lie in one extent of a uid/gid map (no map file:
    not Linux, or no namespaces, so every id is the kernel's own)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return True
    for line in lines:
        fields = line.split()
        if len(fields) == 3:
            first, length = int(fields[0]), int(fields[2])
            if first <= start and end <= first + length:
                return True
    return False


def read_paths(paths: list[str], setting: str = "STEAMHARNESS_WORKER_READ_PATHS") -> tuple[str, ...]:
    """The host folders every run reads besides its own: each an absolute path that
    exists, else ConfigError naming it."""
    for path in paths:
        if not os.path.isabs(path):
            raise ConfigError(f"{setting}: {path!r} is not an absolute path")
        if os.path.realpath(path) == "/":
            raise ConfigError(f"{setting}: {path} would show runs the whole host; name the folders they need")
        if not os.path.exists(path):
            raise ConfigError(f"{setting}: {path} does not exist")
    return tuple(os.path.normpath(p) for p in paths)


def zygote_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The zygote's environment, which every worker inherits as its /proc/<pid>/environ.
    A run's own environment is set inside the worker, never at exec time."""
    return server_base_env(environ, _INTERPRETER_NAMES)


def harden_process() -> None:
    """Make this process non-dumpable: same-user processes (workers, when the server is
    not root) can then not read its memory or its environment (the admin key)."""
    with contextlib.suppress(OSError):
        procs.prctl(procs.PR_SET_DUMPABLE, 0)

"""Who workflow code runs as, and what of the server it can see.

Workflow code is untrusted. When the server runs as root, every run's worker drops to an
unprivileged user (`worker_user`, default `nobody`) before any workflow code runs; the
zygote and the workers start from a scrubbed environment; the server and the zygote are
not dumpable, so a process of the same user cannot read their memory or
`/proc/<pid>/environ`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webui.errors import ConfigError
from webui.runs import procs
from webui.runs.env import server_base_env

log = logging.getLogger(__name__)

# Besides what runs get from the server's environment: what its interpreter needs to start.
_INTERPRETER_NAMES = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class WorkerUser:
    name: str
    uid: int
    gid: int

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid, "gid": self.gid}


def worker_user(name: str | None) -> WorkerUser | None:
    """The user runs drop to, or None when they keep the server's user: the server is
    not root (it cannot switch), or `worker_user` is empty (an explicit opt-out)."""
    if os.geteuid() != 0:
        return None
    if not name:
        log.warning("worker_user is empty: workflow code runs as root, with full access to the server")
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


def zygote_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The zygote's environment, which every worker inherits as its /proc/<pid>/environ.
    A run's own environment is set inside the worker, never at exec time."""
    return server_base_env(environ, _INTERPRETER_NAMES)


def harden_process() -> None:
    """Make this process non-dumpable: same-user processes (workers, when the server is
    not root) can then not read its memory or its environment (the admin key)."""
    with contextlib.suppress(OSError):
        procs.prctl(procs.PR_SET_DUMPABLE, 0)
